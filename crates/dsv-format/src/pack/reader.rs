//! Reading frames and objects back out of packs, every object checked against its id.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::format::{self, Compression};
use super::writer::{PackFile, SealedPack};
use crate::error::{Error, IoResultExt, Result};
use crate::id::ObjectId;

/// Where a frame lives: which pack file, at which offset, and how it is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FrameLocation {
    /// The pack's id (its file name).
    pub pack: ObjectId,
    /// Byte offset of the frame in the pack.
    pub offset: u64,
    /// Stored length in bytes.
    pub stored_length: u32,
    /// Raw length in bytes.
    pub raw_length: u32,
    /// How it is stored.
    pub compression: Compression,
}

/// Where a delta frame's bases are: what [`PackReader::prepare`] asks to build a delta
/// frame's prefix. The store's catalog answers from its tables; [`DeltaMap`] from a map made
/// ahead of time, for threads that hold no catalog connection (checkout's writers).
pub trait BaseLookup {
    /// The bases of the delta frame at `frame`, in prefix order (empty when unknown).
    ///
    /// # Errors
    /// The lookup's own failure.
    fn bases(&self, frame: &FrameLocation) -> Result<Vec<ObjectId>>;

    /// Where base chunk `id` is stored: its frame, its offset in the frame's raw bytes and
    /// its length.
    ///
    /// # Errors
    /// [`Error::MissingObject`] when the chunk is not held; the lookup's own failure.
    fn locate_base(&self, id: &ObjectId) -> Result<(FrameLocation, u32, u32)>;
}

/// A [`BaseLookup`] held in memory: the bases of some delta frames and the places of their
/// bases (and of the bases' bases), made from a catalog before work is shared among threads.
#[derive(Debug, Default, Clone)]
pub struct DeltaMap {
    /// Bases of each delta frame, by (pack, frame offset).
    pub frames: HashMap<(ObjectId, u64), Vec<ObjectId>>,
    /// Where each base chunk is: frame, offset, length.
    pub chunks: HashMap<ObjectId, (FrameLocation, u32, u32)>,
}

impl BaseLookup for DeltaMap {
    fn bases(&self, frame: &FrameLocation) -> Result<Vec<ObjectId>> {
        Ok(self
            .frames
            .get(&(frame.pack, frame.offset))
            .cloned()
            .unwrap_or_default())
    }

    fn locate_base(&self, id: &ObjectId) -> Result<(FrameLocation, u32, u32)> {
        self.chunks
            .get(id)
            .copied()
            .ok_or_else(|| Error::MissingObject {
                id: id.to_hex(),
                what: "base chunk of a delta",
            })
    }
}

/// The most delta frames one [`PackReader::prepare`] decodes (writers' chains need far
/// fewer: commit's are 4 deep, gc's 8, with a few bases each and shared bases read once).
pub(crate) const MAX_PREPARE_DECODES: u32 = 4096;

/// The most bytes of base chunks one [`PackReader::prepare`] keeps to read each base once.
const MAX_PREPARE_KEPT: usize = 64 * 1024 * 1024;

/// What one [`PackReader::prepare`] has done: delta frames decoded, base chunks read (kept
/// up to [`MAX_PREPARE_KEPT`] bytes).
#[derive(Default)]
struct PrepareWork {
    decodes: u32,
    bases: HashMap<ObjectId, Vec<u8>>,
    kept: usize,
}

/// Decoded delta frames a [`PackReader`] keeps besides its `cache_slots` plain frames (a
/// delta frame holds one chunk as writers make it: at most 256 KiB, so about 4 MiB).
pub(crate) const DELTA_CACHE_SLOTS: usize = 16;

/// Pack files a [`PackReader`] keeps open at most (it closes them all when one more is
/// needed).
pub(crate) const MAX_OPEN_PACKS: usize = 16;

/// Reads frames from the packs of one store, keeping a few decompressed frames, open pack
/// files and its buffers for reuse. One per thread: it is not shared.
pub struct PackReader {
    packs_dir: PathBuf,
    files: HashMap<ObjectId, File>,
    /// Decompressed frames, most recently used last.
    cache: Vec<(FrameLocation, Vec<u8>)>,
    cache_slots: usize,
    /// Compressed bytes of the frame being read (reused).
    scratch: Vec<u8>,
    /// One zstd context for every frame (reused).
    decompressor: Option<zstd::bulk::Decompressor<'static>>,
    /// The reference prefix of the delta frame being decoded (reused: a prefix of a few
    /// chunks is past the allocator's mmap threshold, and a fresh one costs page faults for
    /// every delta).
    prefix: Vec<u8>,
}

impl PackReader {
    /// A reader over the packs in `packs_dir` that caches up to `cache_slots` frames (at least 1).
    pub fn new(packs_dir: &Path, cache_slots: usize) -> Self {
        PackReader {
            packs_dir: packs_dir.to_path_buf(),
            files: HashMap::new(),
            cache: Vec::new(),
            cache_slots: cache_slots.max(1),
            scratch: Vec::new(),
            decompressor: None,
            prefix: Vec::new(),
        }
    }

    /// The path of pack `id`.
    pub fn pack_path(&self, id: &ObjectId) -> PathBuf {
        format::pack_path(&self.packs_dir, id)
    }

    /// Makes `location`'s raw (decompressed) bytes the most recent cache entry, reading and
    /// decompressing them on a miss into the buffer of the entry it evicts.
    ///
    /// # Errors
    /// [`Error::Io`] when the pack cannot be read, [`Error::Corrupt`] when it is missing,
    /// truncated, or the frame does not decompress to its recorded length.
    fn load(&mut self, location: &FrameLocation) -> Result<&[u8]> {
        self.load_with(location, None)
    }

    /// True when `location`'s raw bytes are in this reader's cache: a delta frame then reads
    /// without its prefix.
    pub fn is_cached(&self, location: &FrameLocation) -> bool {
        self.cache.iter().any(|(l, _)| l == location)
    }

    /// Makes the frame at `location` readable: a delta frame whose raw bytes are not cached
    /// is decoded against its bases, read (and checked against their ids) through this
    /// reader, their own bases first, as `lookup` lists them. Nothing to do for a plain frame.
    ///
    /// # Errors
    /// [`Error::Corrupt`] for a delta frame with no base listed, a chain deeper than
    /// [`format::MAX_DELTA_DEPTH`] (a cycle), a prefix over [`format::MAX_DELTA_PREFIX`], a base
    /// that does not hash to its id, a frame that does not decode against its prefix;
    /// [`Error::MissingObject`] for a base not held; the lookup's errors; as `load`.
    pub fn prepare(&mut self, location: &FrameLocation, lookup: &dyn BaseLookup) -> Result<()> {
        let mut work = PrepareWork::default();
        self.prepare_at(location, lookup, 0, &mut work)
    }

    fn prepare_at(
        &mut self,
        location: &FrameLocation,
        lookup: &dyn BaseLookup,
        depth: u32,
        work: &mut PrepareWork,
    ) -> Result<()> {
        if location.compression != Compression::Delta || self.is_cached(location) {
            return Ok(());
        }
        let path = self.pack_path(&location.pack);
        // Bounded work: bases shared by many frames of a closure are read once (`work.bases`),
        // and a closure needing more decodes than any writer makes is refused, so a hostile
        // web of deltas cannot make a read run for ever.
        work.decodes += 1;
        if work.decodes > MAX_PREPARE_DECODES {
            return Err(Error::corrupt(
                path,
                format!(
                    "the bases of the delta frame at offset {} need more than {MAX_PREPARE_DECODES} decodes",
                    location.offset
                ),
            ));
        }
        if depth >= format::MAX_DELTA_DEPTH {
            return Err(Error::corrupt(
                path,
                format!(
                    "delta frame at offset {} lies deeper than {} levels of bases (a cycle?)",
                    location.offset,
                    format::MAX_DELTA_DEPTH
                ),
            ));
        }
        let bases = lookup.bases(location)?;
        if bases.is_empty() {
            return Err(Error::corrupt(
                path,
                format!("delta frame at offset {} lists no base", location.offset),
            ));
        }
        // The reused buffer; a nested call (a base that is a delta itself) finds it taken
        // and starts a new one.
        let mut prefix = std::mem::take(&mut self.prefix);
        prefix.clear();
        for base in &bases {
            let (frame, offset, length) = lookup.locate_base(base)?;
            if prefix.len() as u64 + u64::from(length) > format::MAX_DELTA_PREFIX {
                return Err(Error::corrupt(
                    path,
                    format!(
                        "the bases of the delta frame at offset {} are over {} bytes",
                        location.offset,
                        format::MAX_DELTA_PREFIX
                    ),
                ));
            }
            if let Some(bytes) = work.bases.get(base) {
                prefix.extend_from_slice(bytes);
                continue;
            }
            self.prepare_at(&frame, lookup, depth + 1, work)?;
            let start = prefix.len();
            self.with_object(&frame, offset, length, base, true, |bytes| {
                prefix.extend_from_slice(bytes)
            })?;
            let bytes = &prefix[start..];
            if work.kept + bytes.len() <= MAX_PREPARE_KEPT {
                work.kept += bytes.len();
                work.bases.insert(*base, bytes.to_vec());
            }
        }
        let loaded = self.load_delta(location, &prefix);
        self.prefix = prefix;
        loaded
    }

    /// Decodes the delta frame at `location` against `prefix` (the raw bytes of its bases,
    /// end to end, each checked against its id by the caller) into this reader's cache, so
    /// that [`PackReader::with_object`] and [`PackReader::frame`] then read it.
    ///
    /// # Errors
    /// As `PackReader::load`; [`Error::Corrupt`] when the frame or prefix is over the format's
    /// delta limits or the frame does not decompress against the prefix to its length.
    pub fn load_delta(&mut self, location: &FrameLocation, prefix: &[u8]) -> Result<()> {
        self.load_with(location, Some(prefix)).map(|_| ())
    }

    fn load_with(&mut self, location: &FrameLocation, prefix: Option<&[u8]>) -> Result<&[u8]> {
        if let Some(position) = self.cache.iter().position(|(l, _)| l == location) {
            let entry = self.cache.remove(position);
            self.cache.push(entry);
            return Ok(&self.cache.last().expect("just pushed").1);
        }
        let path = format::pack_path(&self.packs_dir, &location.pack);
        if location.raw_length > format::MAX_FRAME_RAW {
            let detail = format!(
                "frame at offset {} claims {} bytes",
                location.offset, location.raw_length
            );
            return Err(Error::corrupt(&path, detail));
        }
        if u64::from(location.stored_length)
            > format::max_stored_len(location.raw_length, location.compression)
        {
            let detail = format!(
                "frame at offset {} claims {} stored bytes for {} raw bytes",
                location.offset, location.stored_length, location.raw_length
            );
            return Err(Error::corrupt(&path, detail));
        }
        if !self.files.contains_key(&location.pack) {
            let file = crate::store_file::open_read(&path).map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => {
                    Error::corrupt(&path, "the catalog names this pack but the file is missing")
                }
                _ => Error::Io {
                    path: path.clone(),
                    source: e,
                },
            })?;
            // The pack's last use, for a store's cache limit (least recently used packs are
            // evicted first): its modification time, set when a reader opens it. Best effort:
            // a store on a read-only filesystem keeps the time of the fetch.
            let _ = file.set_modified(std::time::SystemTime::now());
            // A bounded number of open files: a pack evicted (or collected) while open keeps
            // its disk space until its last descriptor closes.
            if self.files.len() >= MAX_OPEN_PACKS {
                self.files.clear();
            }
            self.files.insert(location.pack, file);
        }
        let file = self.files.get(&location.pack).expect("just inserted");
        // Delta frames (one chunk each, as writers make them) have slots of their own: a
        // chain's small frames evicting the large plain frame its bases lie in would make
        // every chunk of a version decompress that frame again.
        let is_delta = location.compression == Compression::Delta;
        let same_kind = |l: &FrameLocation| (l.compression == Compression::Delta) == is_delta;
        let held = self.cache.iter().filter(|(l, _)| same_kind(l)).count();
        let slots = if is_delta {
            DELTA_CACHE_SLOTS
        } else {
            self.cache_slots
        };
        let mut buffer = match self.cache.iter().position(|(l, _)| same_kind(l)) {
            Some(oldest) if held >= slots => self.cache.remove(oldest).1,
            _ => Vec::new(),
        };
        let read_error = |e: std::io::Error| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                let detail = format!(
                    "pack is truncated: frame at offset {} is cut off",
                    location.offset
                );
                Error::corrupt(&path, detail)
            } else {
                Error::Io {
                    path: path.clone(),
                    source: e,
                }
            }
        };
        match location.compression {
            Compression::Delta => {
                // The prefix comes from `load_delta`; a caller that did not build it has a bug.
                let Some(prefix) = prefix else {
                    return Err(Error::corrupt(
                        &path,
                        format!(
                            "delta frame at offset {} read without its bases",
                            location.offset
                        ),
                    ));
                };
                if location.raw_length > format::MAX_DELTA_RAW
                    || prefix.len() as u64 > format::MAX_DELTA_PREFIX
                {
                    let detail = format!(
                        "delta frame at offset {} is larger than a delta frame may be",
                        location.offset
                    );
                    return Err(Error::corrupt(&path, detail));
                }
                self.scratch.clear();
                self.scratch.resize(location.stored_length as usize, 0);
                file.read_exact_at(&mut self.scratch, location.offset)
                    .map_err(read_error)?;
                super::writer::decompress_delta_frame(
                    &self.scratch,
                    prefix,
                    location.raw_length,
                    &mut buffer,
                )
                .map_err(|e| {
                    Error::corrupt(
                        &path,
                        format!(
                            "delta frame at offset {} does not decompress against its bases: {e}",
                            location.offset
                        ),
                    )
                })?;
            }
            Compression::None => {
                buffer.clear();
                buffer.resize(location.stored_length as usize, 0);
                file.read_exact_at(&mut buffer, location.offset)
                    .map_err(read_error)?;
            }
            Compression::Zstd => {
                self.scratch.clear();
                self.scratch.resize(location.stored_length as usize, 0);
                file.read_exact_at(&mut self.scratch, location.offset)
                    .map_err(read_error)?;
                let decompressor = match &mut self.decompressor {
                    Some(d) => d,
                    None => self
                        .decompressor
                        .insert(zstd::bulk::Decompressor::new().at(&path)?),
                };
                decompress_frame(
                    decompressor,
                    &self.scratch,
                    location.raw_length,
                    &mut buffer,
                )
                .map_err(|e| {
                    Error::corrupt(
                        &path,
                        format!(
                            "frame at offset {} does not decompress: {e}",
                            location.offset
                        ),
                    )
                })?;
            }
        }
        if buffer.len() != location.raw_length as usize {
            return Err(Error::corrupt(
                &path,
                format!("frame at offset {} has the wrong length", location.offset),
            ));
        }
        self.cache.push((*location, buffer));
        Ok(&self.cache.last().expect("just pushed").1)
    }

    /// Calls `f` with one object's bytes, checked: `BLAKE3(bytes) == id` unless `id` is a file
    /// id keying a file map or an outboard (`verify_hash = false`: a map is proven when its
    /// file is read, an outboard when it is decoded; see [`crate::object::ObjectKind::is_hashed`]).
    ///
    /// # Errors
    /// As `PackReader::load`; [`Error::Corrupt`] when the object lies outside its frame or
    /// its bytes do not hash to `id`.
    pub fn with_object<R>(
        &mut self,
        location: &FrameLocation,
        offset: u32,
        length: u32,
        id: &ObjectId,
        verify_hash: bool,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R> {
        let packs_dir = self.packs_dir.clone();
        let path = || format::pack_path(&packs_dir, &location.pack);
        let frame = self.load(location)?;
        let range = offset as usize..offset as usize + length as usize;
        let bytes = frame.get(range).ok_or_else(|| {
            Error::corrupt(
                path(),
                format!("object {} lies outside its frame", id.short()),
            )
        })?;
        if verify_hash && ObjectId::of(bytes) != *id {
            return Err(Error::corrupt(
                path(),
                format!("object {} does not match its hash", id.short()),
            ));
        }
        Ok(f(bytes))
    }

    /// The raw (decompressed) bytes of the frame at `location`, copied out of this reader's
    /// cache: the read engine keeps its own shared cache of whole frames.
    ///
    /// # Errors
    /// [`Error::Corrupt`] (a frame that does not decompress to its length, a truncated or
    /// missing pack); [`Error::Io`].
    pub fn frame(&mut self, location: &FrameLocation) -> Result<Vec<u8>> {
        self.load(location).map(<[u8]>::to_vec)
    }

    /// One object's bytes, copied; as [`PackReader::with_object`].
    ///
    /// # Errors
    /// As [`PackReader::with_object`].
    pub fn object(
        &mut self,
        location: &FrameLocation,
        offset: u32,
        length: u32,
        id: &ObjectId,
        verify_hash: bool,
    ) -> Result<Vec<u8>> {
        self.with_object(location, offset, length, id, verify_hash, <[u8]>::to_vec)
    }
}

/// Decompresses a zstd frame's stored bytes into `buffer` (replacing its contents), as
/// [`PackReader`] does for every compressed frame it reads. The output never exceeds the
/// buffer's capacity, which is made at least `raw_length` (the caller checks `raw_length`
/// against [`format::MAX_FRAME_RAW`] first, and the output's length against `raw_length`
/// after). Public so the decoding of stored frames can be fuzzed.
///
/// # Errors
/// zstd's error when the bytes do not decompress into that capacity.
pub fn decompress_frame(
    decompressor: &mut zstd::bulk::Decompressor<'_>,
    stored: &[u8],
    raw_length: u32,
    buffer: &mut Vec<u8>,
) -> std::io::Result<()> {
    buffer.clear();
    buffer.reserve(raw_length as usize);
    decompressor.decompress_to_buffer(stored, buffer)?;
    Ok(())
}

/// Builds a delta frame's prefix: the raw bytes of its bases, end to end in listed order, each
/// checked against its id (the caller reads them from wherever it keeps chunks).
pub type PrefixSource<'a> = &'a mut dyn FnMut(&[ObjectId]) -> Result<Vec<u8>>;

/// Reads and checks a whole pack, one frame in memory at a time: its name is the BLAKE3 of
/// its bytes, header and trailer magic, index hash, every frame decompresses to its length,
/// every chunk, tree and version hashes to its id. A delta frame is decoded against the prefix
/// `prefix_of` builds from its bases; with `None` (a store whose catalog is being rebuilt),
/// delta frames are checked from the index only and their chunks are not decoded.
///
/// Returns the pack's index.
///
/// # Errors
/// [`Error::Corrupt`] naming the first failed check; [`Error::Io`] when unreadable; the
/// error `prefix_of` returns.
pub fn verify_pack(
    path: &Path,
    id: &ObjectId,
    mut prefix_of: Option<PrefixSource<'_>>,
) -> Result<format::PackIndex> {
    // Verify and repair check the files a listing of the packs directory found.
    let mut file = crate::pack::open_listed_file(path).at(path)?;
    let mut hasher = blake3::Hasher::new();
    hasher.update_reader(&mut file).at(path)?;
    if ObjectId::from(hasher.finalize()) != *id {
        return Err(Error::corrupt(path, "pack bytes do not hash to its name"));
    }
    let index = read_index(&file, path)?;
    let mut reader = PackReader::new(path.parent().unwrap_or(Path::new(".")), 1);
    let mut objects_by_frame = index.objects.iter().peekable();
    for (number, frame) in index.frames.iter().enumerate() {
        let location = FrameLocation {
            pack: *id,
            offset: frame.offset,
            stored_length: frame.stored_length,
            raw_length: frame.raw_length,
            compression: frame.compression,
        };
        let raw = if frame.compression == Compression::Delta {
            match prefix_of.as_mut() {
                Some(prefix_of) => {
                    let prefix = prefix_of(index.bases_of(number as u32))?;
                    reader.load_delta(&location, &prefix)?;
                    Some(reader.load(&location)?)
                }
                None => None,
            }
        } else {
            Some(reader.load(&location)?)
        };
        // Writers append objects in frame order.
        while let Some(object) = objects_by_frame.next_if(|o| o.frame as usize == number) {
            let Some(raw) = raw else { continue };
            let data = &raw[object.offset as usize..(object.offset + object.length) as usize];
            object
                .kind
                .check(&object.id, data)
                .map_err(|detail| Error::corrupt(path, detail))?;
        }
    }
    if objects_by_frame.next().is_some() {
        return Err(Error::corrupt(
            path,
            "the index lists objects out of frame order",
        ));
    }
    Ok(index)
}

/// The pack's tail: its index followed by its trailer, exactly as in the file. A remote keeps
/// this next to each pack (`packs/<id>.idx`) so clients learn a pack's contents in one small
/// request; [`parse_tail`] reads it back.
///
/// # Errors
/// As [`read_index`], which it runs first.
pub fn read_tail(path: &Path) -> Result<Vec<u8>> {
    let file = crate::store_file::open_read(path).at(path)?;
    read_index(&file, path)?;
    let len = file.metadata().at(path)?.len();
    let mut trailer = [0u8; format::TRAILER_LEN as usize];
    file.read_exact_at(&mut trailer, len - format::TRAILER_LEN)
        .at(path)?;
    let index_offset = u64::from_le_bytes(trailer[0..8].try_into().expect("8 bytes"));
    let tail_len = len - index_offset;
    if tail_len > format::MAX_INDEX_LEN + format::TRAILER_LEN {
        return Err(Error::corrupt(
            path,
            "index is longer than a pack's index may be",
        ));
    }
    let mut tail = vec![0u8; tail_len as usize];
    file.read_exact_at(&mut tail, index_offset).at(path)?;
    Ok(tail)
}

/// Parses a pack tail (see [`read_tail`]) of a pack of `pack_size` bytes, checking the
/// trailer's magic, the index position and hash, and every record against the data region.
///
/// # Errors
/// A description of the first failed check.
pub fn parse_tail(tail: &[u8], pack_size: u64) -> std::result::Result<format::PackIndex, String> {
    let trailer_len = format::TRAILER_LEN as usize;
    if tail.len() < trailer_len {
        return Err("pack index shorter than a trailer".into());
    }
    let (index, trailer) = tail.split_at(tail.len() - trailer_len);
    let version = match format::index_version_of(&trailer[48..]) {
        Ok(version) => version,
        Err(Some(newer)) => return Err(format::newer_index_message(newer)),
        Err(None) => return Err("not a dsv pack index (bad magic)".into()),
    };
    let index_offset = u64::from_le_bytes(trailer[0..8].try_into().expect("8 bytes"));
    let index_length = u64::from_le_bytes(trailer[8..16].try_into().expect("8 bytes"));
    if index_length != index.len() as u64
        || index_offset < format::HEADER_LEN
        || index_offset.checked_add(tail.len() as u64) != Some(pack_size)
    {
        return Err("index position in the trailer is wrong".into());
    }
    if blake3::hash(index).as_bytes() != &trailer[16..48] {
        return Err("index does not match its hash".into());
    }
    format::decode_index(index, index_offset, version)
}

/// The error for the pack tail `tail` at `path` (a remote's `packs/<id>.idx`) that
/// [`parse_tail`] refused with `detail`: [`Error::PackTooNew`] when its end magic names an
/// index version newer than this dsv reads (a newer dsv wrote it: nothing is wrong with the
/// remote), else [`Error::Corrupt`].
pub fn tail_error(path: impl Into<PathBuf>, tail: &[u8], detail: String) -> Error {
    let magic = tail
        .len()
        .checked_sub(8)
        .map_or(&[][..], |start| &tail[start..]);
    match format::index_version_of(magic) {
        Err(Some(_)) => Error::PackTooNew {
            path: path.into(),
            detail,
        },
        _ => Error::corrupt(path, detail),
    }
}

/// Reads and checks a pack's header, trailer and index.
///
/// # Errors
/// [`Error::Corrupt`] when the magic, version, index position or index hash is wrong;
/// [`Error::Io`] when unreadable.
pub fn read_index(file: &File, path: &Path) -> Result<format::PackIndex> {
    let bad = |detail: &str| Error::corrupt(path, detail.to_string());
    let len = file.metadata().at(path)?.len();
    if len < format::HEADER_LEN + format::TRAILER_LEN {
        return Err(bad("not a dsv pack (shorter than a header and trailer)"));
    }
    let mut header = [0u8; format::HEADER_LEN as usize];
    file.read_exact_at(&mut header, 0).at(path)?;
    let mut trailer = [0u8; format::TRAILER_LEN as usize];
    file.read_exact_at(&mut trailer, len - format::TRAILER_LEN)
        .at(path)?;
    if &header[..8] != format::MAGIC {
        return Err(bad("not a dsv pack (bad magic)"));
    }
    let index_version = match format::index_version_of(&trailer[48..]) {
        Ok(version) => version,
        Err(Some(newer)) => {
            return Err(Error::PackTooNew {
                path: path.to_path_buf(),
                detail: format::newer_index_message(newer),
            });
        }
        Err(None) => return Err(bad("not a dsv pack (bad magic)")),
    };
    let version = u32::from_le_bytes(header[8..12].try_into().expect("4 bytes"));
    if version > format::FORMAT_VERSION {
        // A later header layout is a newer dsv's, as a later index is.
        return Err(Error::PackTooNew {
            path: path.to_path_buf(),
            detail: format!(
                "pack format version {version} is newer than this dsv reads (it reads up to {}): upgrade dsv",
                format::FORMAT_VERSION
            ),
        });
    }
    if version != format::FORMAT_VERSION {
        return Err(bad(&format!("unknown pack format version {version}")));
    }
    let index_offset = u64::from_le_bytes(trailer[0..8].try_into().expect("8 bytes"));
    let index_length = u64::from_le_bytes(trailer[8..16].try_into().expect("8 bytes"));
    let data_end = len - format::TRAILER_LEN;
    if index_offset < format::HEADER_LEN || index_offset.checked_add(index_length) != Some(data_end)
    {
        return Err(bad("index position in the trailer is wrong"));
    }
    if index_length > format::MAX_INDEX_LEN {
        return Err(bad("index is longer than a pack's index may be"));
    }
    let mut index = vec![0u8; index_length as usize];
    file.read_exact_at(&mut index, index_offset).at(path)?;
    if blake3::hash(&index).as_bytes() != &trailer[16..48] {
        return Err(bad("index does not match its hash"));
    }
    format::decode_index(&index, index_offset, index_version)
        .map_err(|detail| Error::corrupt(path, detail))
}

// Reading a sealed pack back is the reader's: the writer names the reader nowhere.
impl PackFile {
    /// The pack with its index read back from `packs_dir`.
    ///
    /// # Errors
    /// [`crate::Error::Io`] when it cannot be read; [`crate::Error::Corrupt`] when its
    /// length differs from the one sealed or its index does not check
    /// ([`read_index`]).
    pub fn read_index(&self, packs_dir: &Path) -> Result<SealedPack> {
        let path = format::pack_path(packs_dir, &self.id);
        let file = crate::store_file::open_read(&path).at(&path)?;
        let length = file.metadata().at(&path)?.len();
        if length != self.size {
            return Err(crate::Error::corrupt(
                &path,
                format!(
                    "{length} bytes, but {} were sealed under this name",
                    self.size
                ),
            ));
        }
        let index = read_index(&file, &path)?;
        Ok(SealedPack {
            id: self.id,
            size: self.size,
            frames: index.frames,
            objects: index.objects,
            deltas: index.deltas,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::ObjectKind;
    use crate::pack::PackIndex;
    use crate::pack::{FrameBuilder, PackWriter};

    #[test]
    fn a_measuring_writer_computes_the_id_and_size_of_the_pack_it_does_not_write() {
        let dir = tempfile::tempdir().unwrap();
        let mut real = PackWriter::create(dir.path(), dir.path()).unwrap();
        let mut measuring = PackWriter::measuring();
        for round in 0..3u32 {
            let data = format!("row {round}\n").repeat(500 + 100 * round as usize);
            let mut frame = FrameBuilder::default();
            frame.push(
                ObjectId::of(data.as_bytes()),
                ObjectKind::Chunk,
                data.as_bytes(),
            );
            let mut again = FrameBuilder::default();
            again.push(
                ObjectId::of(data.as_bytes()),
                ObjectKind::Chunk,
                data.as_bytes(),
            );
            real.add_frame(frame.encode(3)).unwrap();
            measuring.add_frame(again.encode(3)).unwrap();
        }
        let written = real.finish().unwrap();
        let measured = measuring.finish().unwrap();
        assert_eq!(measured.id, written.id);
        assert_eq!(measured.size, written.size);
        let path = crate::pack::writer::pack_path(dir.path(), &written.id);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), written.size);
        // Only the real writer's pack is on disk.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_written_pack_reads_back_and_verifies() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = PackWriter::create(dir.path(), dir.path()).unwrap();
        let mut frame = FrameBuilder::default();
        let a = b"compressible ".repeat(1000);
        let b: Vec<u8> = (0..5000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        frame.push(ObjectId::of(&a), ObjectKind::Chunk, &a);
        frame.push(ObjectId::of(&b), ObjectKind::Chunk, &b);
        writer.add_frame(frame.encode(3)).unwrap();
        let sealed = writer.finish().unwrap();
        let path = crate::pack::writer::pack_path(dir.path(), &sealed.id);
        let PackIndex {
            frames, objects, ..
        } = verify_pack(&path, &sealed.id, None).unwrap();
        assert_eq!(frames, sealed.frames);
        assert_eq!(objects, sealed.objects);
        assert_eq!(frames[0].compression, Compression::Zstd);

        let mut reader = PackReader::new(dir.path(), 2);
        let f = frames[0];
        let location = FrameLocation {
            pack: sealed.id,
            offset: f.offset,
            stored_length: f.stored_length,
            raw_length: f.raw_length,
            compression: f.compression,
        };
        let o = objects[1];
        assert_eq!(
            reader
                .object(&location, o.offset, o.length, &o.id, true)
                .unwrap(),
            b
        );

        // A flipped byte anywhere is caught.
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[40] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert!(matches!(
            verify_pack(&path, &sealed.id, None),
            Err(Error::Corrupt { .. })
        ));
        let mut fresh = PackReader::new(dir.path(), 2);
        let results: Vec<_> = objects
            .iter()
            .map(|o| fresh.object(&location, o.offset, o.length, &o.id, true))
            .collect();
        assert!(
            results.iter().any(|r| r.is_err()),
            "a flipped byte went unnoticed"
        );
    }

    /// Bytes zstd cannot shrink (BLAKE3's extendable output).
    fn noise(len: usize, seed: u32) -> Vec<u8> {
        let mut out = vec![0; len];
        blake3::Hasher::new()
            .update(&seed.to_le_bytes())
            .finalize_xof()
            .fill(&mut out);
        out
    }

    /// The chunks of the pack [`sample_pack`] writes, frame by frame.
    fn sample_chunks() -> Vec<Vec<Vec<u8>>> {
        vec![
            vec![b"line of text\n".repeat(300), b"more text".repeat(40)],
            vec![noise(4000, 1)],
            vec![noise(10, 2), b"".to_vec(), b"z".repeat(5000)],
        ]
    }

    /// A pack of [`sample_chunks`] in `dir`: its seal and its path.
    fn sample_pack(dir: &Path) -> (crate::pack::SealedPack, PathBuf) {
        let mut writer = PackWriter::create(dir, dir).unwrap();
        for chunks in sample_chunks() {
            let mut frame = FrameBuilder::default();
            for chunk in &chunks {
                frame.push(ObjectId::of(chunk), ObjectKind::Chunk, chunk);
            }
            writer.add_frame(frame.encode(3)).unwrap();
        }
        let sealed = writer.finish().unwrap();
        let path = crate::pack::writer::pack_path(dir, &sealed.id);
        (sealed, path)
    }

    fn location(pack: ObjectId, frame: &format::FrameRecord) -> FrameLocation {
        FrameLocation {
            pack,
            offset: frame.offset,
            stored_length: frame.stored_length,
            raw_length: frame.raw_length,
            compression: frame.compression,
        }
    }

    /// The pack's bytes before its index (header and frames).
    fn data_of(bytes: &[u8]) -> &[u8] {
        let trailer = &bytes[bytes.len() - format::TRAILER_LEN as usize..];
        let index_offset = u64::from_le_bytes(trailer[0..8].try_into().unwrap());
        &bytes[..index_offset as usize]
    }

    /// `data` followed by `index` and a trailer that fits them (offset, length, hash, magic).
    fn sealed_with(data: &[u8], index: &[u8]) -> Vec<u8> {
        let mut out = data.to_vec();
        out.extend_from_slice(index);
        out.extend_from_slice(&(data.len() as u64).to_le_bytes());
        out.extend_from_slice(&(index.len() as u64).to_le_bytes());
        out.extend_from_slice(blake3::hash(index).as_bytes());
        out.extend_from_slice(format::END_MAGIC);
        out
    }

    /// `bytes` with trailer fields `offset` and `length` replaced (the hash kept).
    fn with_trailer_position(bytes: &[u8], offset: u64, length: u64) -> Vec<u8> {
        let mut out = bytes.to_vec();
        let at = out.len() - format::TRAILER_LEN as usize;
        out[at..at + 8].copy_from_slice(&offset.to_le_bytes());
        out[at + 8..at + 16].copy_from_slice(&length.to_le_bytes());
        out
    }

    /// What [`read_index`] says of a file holding `bytes`.
    fn read_index_of(bytes: &[u8]) -> Result<PackIndex> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("damaged.pack");
        std::fs::write(&path, bytes).unwrap();
        read_index(&File::open(&path).unwrap(), &path)
    }

    fn corrupt_detail<T: std::fmt::Debug>(result: Result<T>) -> String {
        match result {
            Err(Error::Corrupt { detail, .. }) => detail,
            other => panic!("expected Error::Corrupt, got {other:?}"),
        }
    }

    #[test]
    fn every_frame_reads_back_bit_identical_to_what_the_writer_was_given() {
        let dir = tempfile::tempdir().unwrap();
        let (sealed, _) = sample_pack(dir.path());
        let compressions: Vec<_> = sealed.frames.iter().map(|f| f.compression).collect();
        assert!(compressions.contains(&Compression::Zstd));
        assert!(compressions.contains(&Compression::None));
        // One cache slot: every frame is read from the file again.
        let mut reader = PackReader::new(dir.path(), 0);
        for _ in 0..2 {
            for (frame, chunks) in sealed.frames.iter().zip(sample_chunks()) {
                assert_eq!(
                    reader.frame(&location(sealed.id, frame)).unwrap(),
                    chunks.concat()
                );
            }
        }
        let chunks: Vec<Vec<u8>> = sample_chunks().into_iter().flatten().collect();
        assert_eq!(sealed.objects.len(), chunks.len());
        for (object, chunk) in sealed.objects.iter().zip(&chunks) {
            let at = location(sealed.id, &sealed.frames[object.frame as usize]);
            let bytes = reader
                .object(&at, object.offset, object.length, &object.id, true)
                .unwrap();
            assert_eq!(&bytes, chunk);
        }
    }

    #[test]
    fn the_tail_is_the_files_index_and_trailer_and_parses_back() {
        let dir = tempfile::tempdir().unwrap();
        let (sealed, path) = sample_pack(dir.path());
        let bytes = std::fs::read(&path).unwrap();
        let tail = read_tail(&path).unwrap();
        assert_eq!(tail, &bytes[data_of(&bytes).len()..]);
        let PackIndex {
            frames, objects, ..
        } = parse_tail(&tail, sealed.size).unwrap();
        assert_eq!(frames, sealed.frames);
        assert_eq!(objects, sealed.objects);
        assert_eq!(
            read_index(&File::open(&path).unwrap(), &path).unwrap(),
            PackIndex {
                frames,
                objects,
                deltas: vec![]
            }
        );
    }

    #[test]
    fn a_tail_whose_position_or_hash_is_wrong_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (sealed, path) = sample_pack(dir.path());
        let tail = read_tail(&path).unwrap();
        let size = sealed.size;
        // Another pack size: the index does not sit where the trailer says.
        assert!(parse_tail(&tail, size + 1).is_err());
        assert!(parse_tail(&tail, size - 1).is_err());
        assert!(parse_tail(&tail, u64::MAX).is_err());
        let index_len = tail.len() as u64 - format::TRAILER_LEN;
        let offset = size - tail.len() as u64;
        for (offset, length) in [
            (offset, index_len + 1),
            (offset, u64::MAX),
            (offset + 1, index_len),
            (u64::MAX, index_len),
            (format::HEADER_LEN - 1, index_len),
        ] {
            let moved = with_trailer_position(&tail, offset, length);
            assert!(parse_tail(&moved, size).is_err(), "{offset} {length}");
        }
        // A tail claiming a shorter pack whose index would start inside the header.
        let short = tail.len() as u64 + format::HEADER_LEN - 1;
        let early = with_trailer_position(&tail, format::HEADER_LEN - 1, index_len);
        assert!(parse_tail(&early, short).is_err());
        // The hash, the magic, too short a tail.
        let mut flipped = tail.clone();
        flipped[0] ^= 1;
        let error = parse_tail(&flipped, size).unwrap_err();
        assert!(error.contains("hash"), "{error}");
        let mut magic = tail.clone();
        *magic.last_mut().unwrap() ^= 1;
        assert!(parse_tail(&magic, size).is_err());
        for cut in [0, 1, format::TRAILER_LEN as usize - 1] {
            assert!(parse_tail(&tail[tail.len() - cut..], size).is_err());
        }
    }

    #[test]
    fn a_trailer_claiming_an_index_larger_than_the_file_is_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let (_, path) = sample_pack(dir.path());
        let bytes = std::fs::read(&path).unwrap();
        let len = bytes.len() as u64;
        let data = data_of(&bytes).len() as u64;
        let index_len = len - format::TRAILER_LEN - data;
        for (offset, length) in [
            (data, index_len + 1),
            (data, len),
            (data, u64::MAX),
            (data - 1, index_len),
            (u64::MAX, index_len),
            (0, len - format::TRAILER_LEN),
            (format::HEADER_LEN, u64::MAX - format::HEADER_LEN + 1),
        ] {
            let detail = corrupt_detail(read_index_of(&with_trailer_position(
                &bytes, offset, length,
            )));
            assert!(
                detail.contains("index position"),
                "{offset} {length}: {detail}"
            );
        }
    }

    #[test]
    fn an_index_longer_than_any_pack_may_have_is_refused_before_it_is_read() {
        // A sparse file just over the longest index: a trailer placing the index right after
        // the header is consistent with the file's length, but claims more than a pack may.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("huge.pack");
        let index_len = format::MAX_INDEX_LEN + 1;
        let len = format::HEADER_LEN + index_len + format::TRAILER_LEN;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        file.set_len(len).unwrap();
        let mut header = format::MAGIC.to_vec();
        header.extend_from_slice(&format::FORMAT_VERSION.to_le_bytes());
        header.extend_from_slice(&[0; 4]);
        file.write_all_at(&header, 0).unwrap();
        let mut trailer = format::HEADER_LEN.to_le_bytes().to_vec();
        trailer.extend_from_slice(&index_len.to_le_bytes());
        trailer.extend_from_slice(&[0; 32]);
        trailer.extend_from_slice(format::END_MAGIC);
        file.write_all_at(&trailer, len - format::TRAILER_LEN)
            .unwrap();
        let detail = corrupt_detail(read_index(&file, &path));
        assert!(
            detail.contains("longer than a pack's index may be"),
            "{detail}"
        );
        let detail = corrupt_detail(read_tail(&path));
        assert!(
            detail.contains("longer than a pack's index may be"),
            "{detail}"
        );
    }

    #[test]
    fn an_index_that_does_not_match_its_hash_is_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let (_, path) = sample_pack(dir.path());
        let bytes = std::fs::read(&path).unwrap();
        let data = data_of(&bytes).len();
        let hash_at = bytes.len() - format::TRAILER_LEN as usize + 16;
        for at in [
            data,
            data + 9,
            bytes.len() - format::TRAILER_LEN as usize - 1,
            hash_at,
            hash_at + 31,
        ] {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x40;
            let detail = corrupt_detail(read_index_of(&damaged));
            assert!(
                detail.contains("does not match its hash"),
                "byte {at}: {detail}"
            );
        }
    }

    #[test]
    fn a_hashed_index_with_records_outside_the_file_is_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let (sealed, path) = sample_pack(dir.path());
        let bytes = std::fs::read(&path).unwrap();
        let data = data_of(&bytes);
        let data_end = data.len() as u64;
        let reseal = |frames: &[format::FrameRecord], objects: &[format::ObjectRecord]| {
            sealed_with(data, &format::encode_index(frames, objects, &[]))
        };
        // Unchanged, resealing gives the file back.
        assert_eq!(reseal(&sealed.frames, &sealed.objects), bytes);
        let mut past_the_end = sealed.frames.clone();
        past_the_end[2].offset = data_end - u64::from(past_the_end[2].stored_length) + 1;
        let mut into_the_header = sealed.frames.clone();
        into_the_header[0].offset = format::HEADER_LEN - 1;
        let mut past_its_frame = sealed.objects.clone();
        past_its_frame[0].length = sealed.frames[0].raw_length + 1;
        let mut no_such_frame = sealed.objects.clone();
        no_such_frame[0].frame = 3;
        for damaged in [
            reseal(&past_the_end, &sealed.objects),
            reseal(&into_the_header, &sealed.objects),
            reseal(&sealed.frames, &past_its_frame),
            reseal(&sealed.frames, &no_such_frame),
        ] {
            corrupt_detail(read_index_of(&damaged));
        }
    }

    #[test]
    fn a_hashed_index_claiming_more_records_than_a_pack_may_hold_is_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let (_, path) = sample_pack(dir.path());
        let bytes = std::fs::read(&path).unwrap();
        for (frames, objects) in [
            (format::MAX_PACK_FRAMES + 1, 0u32),
            (0, format::MAX_PACK_OBJECTS + 1),
            (u32::MAX, u32::MAX),
        ] {
            let mut index = frames.to_le_bytes().to_vec();
            index.extend_from_slice(&objects.to_le_bytes());
            let detail = corrupt_detail(read_index_of(&sealed_with(data_of(&bytes), &index)));
            assert!(detail.contains("more than a pack may hold"), "{detail}");
        }
    }

    #[test]
    fn a_file_that_is_not_a_whole_pack_is_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let (_, path) = sample_pack(dir.path());
        let bytes = std::fs::read(&path).unwrap();
        let minimum = (format::HEADER_LEN + format::TRAILER_LEN) as usize;
        for cut in [0, 1, minimum - 1] {
            corrupt_detail(read_index_of(&bytes[..cut]));
        }
        corrupt_detail(read_index_of(&bytes[..bytes.len() - 1]));
        corrupt_detail(read_index_of(&bytes[1..]));
        let mut magic = bytes.clone();
        magic[0] ^= 1;
        assert!(corrupt_detail(read_index_of(&magic)).contains("magic"));
        // A header version 0 is no dsv's; a later one is a newer dsv's pack.
        let mut version = bytes.clone();
        version[8] = 0;
        assert!(corrupt_detail(read_index_of(&version)).contains("version 0"));
        version[8] = 2;
        let error = read_index_of(&version).unwrap_err();
        assert!(matches!(error, Error::PackTooNew { .. }), "{error}");
        assert!(error.to_string().contains("needs a newer dsv"), "{error}");
        // The smallest pack, no frames, reads back.
        let empty = sealed_with(
            &bytes[..format::HEADER_LEN as usize],
            &format::encode_index(&[], &[], &[]),
        );
        assert_eq!(read_index_of(&empty).unwrap(), PackIndex::default());
    }

    #[test]
    fn a_frame_location_past_the_limits_is_refused_before_reading() {
        let dir = tempfile::tempdir().unwrap();
        let (sealed, _) = sample_pack(dir.path());
        let mut reader = PackReader::new(dir.path(), 2);
        let good = location(sealed.id, &sealed.frames[1]);
        assert_eq!(good.compression, Compression::None);
        let too_large = FrameLocation {
            raw_length: format::MAX_FRAME_RAW + 1,
            stored_length: format::MAX_FRAME_RAW + 1,
            ..good
        };
        assert!(corrupt_detail(reader.frame(&too_large)).contains("claims"));
        let overstored = FrameLocation {
            stored_length: good.raw_length + 1,
            ..good
        };
        assert!(corrupt_detail(reader.frame(&overstored)).contains("stored bytes"));
        // Past the end of the file.
        let past_the_end = FrameLocation {
            offset: sealed.size - 10,
            ..good
        };
        assert!(corrupt_detail(reader.frame(&past_the_end)).contains("truncated"));
        let far = FrameLocation {
            offset: sealed.size + 1_000_000,
            ..good
        };
        assert!(corrupt_detail(reader.frame(&far)).contains("truncated"));
        // A missing pack.
        let missing = FrameLocation {
            pack: ObjectId::of(b"no such pack"),
            ..good
        };
        assert!(corrupt_detail(reader.frame(&missing)).contains("missing"));
        // The reader still serves the good frame.
        assert_eq!(reader.frame(&good).unwrap(), noise(4000, 1));
    }

    #[test]
    fn a_frame_that_does_not_decompress_to_its_recorded_length_is_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let (sealed, _) = sample_pack(dir.path());
        let zstd = location(sealed.id, &sealed.frames[0]);
        assert_eq!(zstd.compression, Compression::Zstd);
        let raw = sealed.frames[1];
        let mut reader = PackReader::new(dir.path(), 4);
        for wrong in [
            FrameLocation {
                raw_length: zstd.raw_length - 1,
                ..zstd
            },
            FrameLocation {
                raw_length: zstd.raw_length + 1,
                ..zstd
            },
            // Stored bytes that are not one zstd frame.
            FrameLocation {
                compression: Compression::Zstd,
                ..location(sealed.id, &raw)
            },
            FrameLocation {
                stored_length: zstd.stored_length - 1,
                ..zstd
            },
            // Stored as is, but fewer stored bytes than raw ones.
            FrameLocation {
                stored_length: raw.stored_length - 1,
                ..location(sealed.id, &raw)
            },
        ] {
            corrupt_detail(reader.frame(&wrong));
        }
    }

    #[test]
    fn an_object_is_served_only_inside_its_frame_and_matching_its_id() {
        let dir = tempfile::tempdir().unwrap();
        let (sealed, _) = sample_pack(dir.path());
        let mut reader = PackReader::new(dir.path(), 2);
        let object = sealed.objects[0];
        let at = location(sealed.id, &sealed.frames[0]);
        let frame_len = at.raw_length;
        for (offset, length) in [(0, frame_len + 1), (frame_len, 1), (u32::MAX, u32::MAX)] {
            let detail = corrupt_detail(reader.object(&at, offset, length, &object.id, false));
            assert!(detail.contains("outside its frame"), "{detail}");
        }
        // Other bytes than the id's.
        let other = sealed.objects[1];
        let detail =
            corrupt_detail(reader.object(&at, other.offset, other.length, &object.id, true));
        assert!(detail.contains("does not match its hash"), "{detail}");
        // Unchecked (a file map's key is its file's id), the bytes are served as they are.
        let bytes = reader
            .object(&at, other.offset, other.length, &object.id, false)
            .unwrap();
        assert_eq!(bytes, sample_chunks()[0][1]);
        let length = reader
            .with_object(
                &at,
                object.offset,
                object.length,
                &object.id,
                true,
                <[u8]>::len,
            )
            .unwrap();
        assert_eq!(length, object.length as usize);
    }

    #[test]
    fn verify_pack_refuses_a_pack_not_named_by_its_hash_or_listing_objects_out_of_frame_order() {
        let dir = tempfile::tempdir().unwrap();
        let (sealed, path) = sample_pack(dir.path());
        assert!(
            corrupt_detail(verify_pack(&path, &ObjectId::of(b"another name"), None))
                .contains("do not hash to its name")
        );
        let bytes = std::fs::read(&path).unwrap();
        let mut objects = sealed.objects.clone();
        objects.reverse();
        let reordered = sealed_with(
            data_of(&bytes),
            &format::encode_index(&sealed.frames, &objects, &[]),
        );
        let id = ObjectId::of(&reordered);
        let other = crate::pack::writer::pack_path(dir.path(), &id);
        std::fs::write(&other, &reordered).unwrap();
        let detail = corrupt_detail(verify_pack(&other, &id, None));
        assert!(detail.contains("out of frame order"), "{detail}");
    }

    /// A growing table: `rows` lines of a deterministic CSV.
    fn table(rows: usize) -> Vec<u8> {
        (0..rows)
            .map(|i| format!("{i},country-{},{}\n", i % 37, i * 7919 % 10007))
            .collect::<String>()
            .into_bytes()
    }

    /// A pack holding `base` plain in frame 0 and `target` as a delta against it in frame 1.
    fn delta_pack(dir: &Path, base: &[u8], target: &[u8]) -> (SealedPack, DeltaMap) {
        let mut writer = PackWriter::create(dir, dir).unwrap();
        let mut plain = FrameBuilder::default();
        plain.push(ObjectId::of(base), ObjectKind::Chunk, base);
        writer.add_frame(plain.encode(3)).unwrap();
        let mut delta = FrameBuilder::default();
        delta.push(ObjectId::of(target), ObjectKind::Chunk, target);
        let mut compressor = crate::pack::DeltaCompressor::default();
        let frame = delta
            .encode_delta(&mut compressor, 3, base, vec![ObjectId::of(base)])
            .unwrap();
        writer.add_frame(frame).unwrap();
        let sealed = writer.finish().unwrap();
        let mut map = DeltaMap::default();
        let base_frame = location(sealed.id, &sealed.frames[0]);
        map.chunks
            .insert(ObjectId::of(base), (base_frame, 0, base.len() as u32));
        map.frames.insert(
            (sealed.id, sealed.frames[1].offset),
            sealed.bases_of(1).to_vec(),
        );
        (sealed, map)
    }

    #[test]
    fn a_delta_frame_is_small_reads_back_through_its_base_and_makes_an_index_2() {
        let dir = tempfile::tempdir().unwrap();
        let base = table(3000);
        let mut target = table(3000);
        target.extend_from_slice(b"3000,country-new,1\n");
        let (sealed, map) = delta_pack(dir.path(), &base, &target);
        assert_eq!(sealed.frames[1].compression, Compression::Delta);
        let plain = zstd::bulk::compress(&target, 3).unwrap().len();
        assert!(
            (sealed.frames[1].stored_length as usize) * 10 < plain,
            "a delta of one appended row is far smaller than the chunk alone: {} vs {plain}",
            sealed.frames[1].stored_length
        );
        let path = format::pack_path(dir.path(), &sealed.id);
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[bytes.len() - 8..], format::END_MAGIC_DELTAS);
        let index = read_index(&File::open(&path).unwrap(), &path).unwrap();
        assert_eq!(index.deltas, sealed.deltas);
        assert_eq!(index.bases_of(1), &[ObjectId::of(&base)]);
        // Read through the map: the base first, checked, then the delta.
        let mut reader = PackReader::new(dir.path(), 1);
        let at = location(sealed.id, &sealed.frames[1]);
        assert!(
            reader.frame(&at).is_err(),
            "no delta is read without its bases"
        );
        reader.prepare(&at, &map).unwrap();
        let id = ObjectId::of(&target);
        assert_eq!(
            reader
                .object(&at, 0, target.len() as u32, &id, true)
                .unwrap(),
            target
        );
        // verify_pack decodes it against the prefix its callback builds.
        let mut prefix_of = |bases: &[ObjectId]| {
            assert_eq!(bases, &[ObjectId::of(&base)]);
            Ok(base.clone())
        };
        verify_pack(&path, &sealed.id, Some(&mut prefix_of)).unwrap();
        let mut wrong = |_: &[ObjectId]| Ok(table(10));
        assert!(verify_pack(&path, &sealed.id, Some(&mut wrong)).is_err());
        verify_pack(&path, &sealed.id, None).unwrap();
    }

    #[test]
    fn a_pack_without_deltas_is_written_exactly_as_before() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = PackWriter::create(dir.path(), dir.path()).unwrap();
        let data = table(100);
        let mut frame = FrameBuilder::default();
        frame.push(ObjectId::of(&data), ObjectKind::Chunk, &data);
        writer.add_frame(frame.encode(3)).unwrap();
        let sealed = writer.finish().unwrap();
        let bytes = std::fs::read(format::pack_path(dir.path(), &sealed.id)).unwrap();
        assert_eq!(&bytes[bytes.len() - 8..], format::END_MAGIC);
        assert!(sealed.deltas.is_empty());
    }

    #[test]
    fn a_chain_that_returns_to_itself_or_lacks_a_base_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let base = table(500);
        let mut target = table(500);
        target.push(b'x');
        let (sealed, mut map) = delta_pack(dir.path(), &base, &target);
        let at = location(sealed.id, &sealed.frames[1]);
        // The base is said to lie in the delta frame itself: a cycle.
        map.chunks
            .insert(ObjectId::of(&base), (at, 0, base.len() as u32));
        let error = PackReader::new(dir.path(), 4)
            .prepare(&at, &map)
            .unwrap_err();
        assert!(error.to_string().contains("levels of bases"), "{error}");
        map.chunks.clear();
        let error = PackReader::new(dir.path(), 4)
            .prepare(&at, &map)
            .unwrap_err();
        assert!(matches!(error, Error::MissingObject { .. }), "{error}");
    }

    #[test]
    fn a_newer_index_version_is_refused_as_needing_a_newer_dsv() {
        let dir = tempfile::tempdir().unwrap();
        let (sealed, _) = delta_pack(dir.path(), &table(50), &table(51));
        let path = format::pack_path(dir.path(), &sealed.id);
        let mut bytes = std::fs::read(&path).unwrap();
        let end = bytes.len();
        bytes[end - 1] = b'3';
        let newer = dir.path().join("newer.pack");
        std::fs::write(&newer, &bytes).unwrap();
        let error = read_index(&File::open(&newer).unwrap(), &newer).unwrap_err();
        assert!(matches!(error, Error::PackTooNew { .. }), "{error}");
        assert!(error.to_string().contains("needs a newer dsv"), "{error}");
        let tail_start = end
            - (end
                - sealed
                    .frames
                    .last()
                    .map_or(16, |f| (f.offset + u64::from(f.stored_length)) as usize));
        let message = parse_tail(&bytes[tail_start..], end as u64).unwrap_err();
        assert!(message.contains("newer than this dsv reads"), "{message}");
    }
}
