//! Reading frames and objects back out of packs, every object checked against its id.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::format::{self, Compression};
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
        }
    }

    /// The path of pack `id`.
    pub fn pack_path(&self, id: &ObjectId) -> PathBuf {
        super::writer::pack_path(&self.packs_dir, id)
    }

    /// Makes `location`'s raw (decompressed) bytes the most recent cache entry, reading and
    /// decompressing them on a miss into the buffer of the entry it evicts.
    ///
    /// # Errors
    /// [`Error::Io`] when the pack cannot be read, [`Error::Corrupt`] when it is missing,
    /// truncated, or the frame does not decompress to its recorded length.
    fn load(&mut self, location: &FrameLocation) -> Result<&[u8]> {
        if let Some(position) = self.cache.iter().position(|(l, _)| l == location) {
            let entry = self.cache.remove(position);
            self.cache.push(entry);
            return Ok(&self.cache.last().expect("just pushed").1);
        }
        let path = super::writer::pack_path(&self.packs_dir, &location.pack);
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
        let file = match self.files.entry(location.pack) {
            std::collections::hash_map::Entry::Occupied(entry) => entry.into_mut(),
            std::collections::hash_map::Entry::Vacant(entry) => {
                entry.insert(File::open(&path).map_err(|e| match e.kind() {
                    std::io::ErrorKind::NotFound => {
                        Error::corrupt(&path, "the catalog names this pack but the file is missing")
                    }
                    _ => Error::Io {
                        path: path.clone(),
                        source: e,
                    },
                })?)
            }
        };
        let mut buffer = if self.cache.len() >= self.cache_slots {
            self.cache.remove(0).1
        } else {
            Vec::new()
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
    /// As [`PackReader::load`]; [`Error::Corrupt`] when the object lies outside its frame or
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
        let path = || super::writer::pack_path(&packs_dir, &location.pack);
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

/// Reads and checks a whole pack, one frame in memory at a time: its name is the BLAKE3 of
/// its bytes, header and trailer magic, index hash, every frame decompresses to its length,
/// every chunk, tree and version hashes to its id.
///
/// Returns the pack's frames and objects.
///
/// # Errors
/// [`Error::Corrupt`] naming the first failed check; [`Error::Io`] when unreadable.
pub fn verify_pack(
    path: &Path,
    id: &ObjectId,
) -> Result<(Vec<format::FrameRecord>, Vec<format::ObjectRecord>)> {
    // Verify and repair check the files a listing of the packs directory found.
    let mut file = crate::pack::open_listed_file(path).at(path)?;
    let mut hasher = blake3::Hasher::new();
    hasher.update_reader(&mut file).at(path)?;
    if ObjectId::from(hasher.finalize()) != *id {
        return Err(Error::corrupt(path, "pack bytes do not hash to its name"));
    }
    let (frames, objects) = read_index(&file, path)?;
    let mut reader = PackReader::new(path.parent().unwrap_or(Path::new(".")), 1);
    let mut objects_by_frame = objects.iter().peekable();
    for (index, frame) in frames.iter().enumerate() {
        let location = FrameLocation {
            pack: *id,
            offset: frame.offset,
            stored_length: frame.stored_length,
            raw_length: frame.raw_length,
            compression: frame.compression,
        };
        let raw = reader.load(&location)?;
        // Writers append objects in frame order.
        while let Some(object) = objects_by_frame.next_if(|o| o.frame as usize == index) {
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
    Ok((frames, objects))
}

/// The pack's tail: its index followed by its trailer, exactly as in the file. A remote keeps
/// this next to each pack (`packs/<id>.idx`) so clients learn a pack's contents in one small
/// request; [`parse_tail`] reads it back.
///
/// # Errors
/// As [`read_index`], which it runs first.
pub fn read_tail(path: &Path) -> Result<Vec<u8>> {
    let file = File::open(path).at(path)?;
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
pub fn parse_tail(
    tail: &[u8],
    pack_size: u64,
) -> std::result::Result<(Vec<format::FrameRecord>, Vec<format::ObjectRecord>), String> {
    let trailer_len = format::TRAILER_LEN as usize;
    if tail.len() < trailer_len {
        return Err("pack index shorter than a trailer".into());
    }
    let (index, trailer) = tail.split_at(tail.len() - trailer_len);
    if &trailer[48..] != format::END_MAGIC {
        return Err("not a dsv pack index (bad magic)".into());
    }
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
    format::decode_index(index, index_offset)
}

/// Reads and checks a pack's header, trailer and index.
///
/// # Errors
/// [`Error::Corrupt`] when the magic, version, index position or index hash is wrong;
/// [`Error::Io`] when unreadable.
pub fn read_index(
    file: &File,
    path: &Path,
) -> Result<(Vec<format::FrameRecord>, Vec<format::ObjectRecord>)> {
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
    if &header[..8] != format::MAGIC || &trailer[48..] != format::END_MAGIC {
        return Err(bad("not a dsv pack (bad magic)"));
    }
    let version = u32::from_le_bytes(header[8..12].try_into().expect("4 bytes"));
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
    format::decode_index(&index, index_offset).map_err(|detail| Error::corrupt(path, detail))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::ObjectKind;
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
        let (frames, objects) = verify_pack(&path, &sealed.id).unwrap();
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
            verify_pack(&path, &sealed.id),
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
}
