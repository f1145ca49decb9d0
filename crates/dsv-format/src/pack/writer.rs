//! Building frames and writing packs.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::format::{self, Compression, FrameBases, FrameRecord, ObjectRecord};
pub use super::format::{pack_id_of, pack_path};
use crate::error::{IoResultExt, Result};
use crate::id::ObjectId;
use crate::object::ObjectKind;

/// Collects neighbouring objects' raw bytes into one frame before compression.
#[derive(Default)]
pub struct FrameBuilder {
    raw: Vec<u8>,
    objects: Vec<(ObjectId, ObjectKind, u32, u32)>,
}

impl FrameBuilder {
    /// Appends one object.
    pub fn push(&mut self, id: ObjectId, kind: ObjectKind, bytes: &[u8]) {
        let offset = self.raw.len() as u32;
        self.raw.extend_from_slice(bytes);
        self.objects.push((id, kind, offset, bytes.len() as u32));
    }

    /// Raw bytes collected so far.
    pub fn len(&self) -> usize {
        self.raw.len()
    }

    /// True when no object was pushed.
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// An empty builder with room for `bytes` raw bytes.
    pub fn with_capacity(bytes: usize) -> Self {
        FrameBuilder {
            raw: Vec::with_capacity(bytes),
            objects: Vec::new(),
        }
    }

    /// Compresses the collected bytes with zstd at `level`; see [`FrameBuilder::encode_with`].
    pub fn encode(&mut self, level: i32) -> EncodedFrame {
        match zstd::bulk::Compressor::new(level) {
            Ok(mut compressor) => self.encode_with(&mut compressor),
            Err(_) => self.encode_raw(),
        }
    }

    /// Compresses the collected bytes with `compressor` (reused across frames: a zstd context
    /// costs megabytes to set up), keeping them raw when compression saves less than 1/32 of
    /// their size (already-compressed media such as PNG or JPEG). Leaves the builder empty.
    pub fn encode_with(&mut self, compressor: &mut zstd::bulk::Compressor<'_>) -> EncodedFrame {
        match compressor.compress(&self.raw) {
            Ok(compressed) if compressed.len() < self.raw.len() - self.raw.len() / 32 => {
                let raw_length = self.raw.len() as u32;
                self.raw.clear();
                EncodedFrame {
                    stored: compressed,
                    raw_length,
                    compression: Compression::Zstd,
                    objects: std::mem::take(&mut self.objects),
                    bases: Vec::new(),
                }
            }
            _ => self.encode_raw(),
        }
    }

    fn encode_raw(&mut self) -> EncodedFrame {
        let raw = std::mem::take(&mut self.raw);
        EncodedFrame {
            raw_length: raw.len() as u32,
            stored: raw,
            compression: Compression::None,
            objects: std::mem::take(&mut self.objects),
            bases: Vec::new(),
        }
    }

    /// Compresses the collected chunks as a delta frame: one zstd frame at `level` against
    /// `prefix`, the raw bytes of `bases` end to end (the caller reads them, checked, from the
    /// store). Leaves the builder empty. The caller compares [`EncodedFrame::stored_len`] with
    /// a plain encoding and keeps the better.
    ///
    /// # Errors
    /// zstd's error; a builder holding anything but chunks, no base or more than
    /// [`format::MAX_DELTA_BASES`], a prefix over [`format::MAX_DELTA_PREFIX`] bytes or raw
    /// bytes over [`format::MAX_DELTA_RAW`] are `InvalidInput` (the builder is left as it was).
    pub fn encode_delta(
        &mut self,
        compressor: &mut DeltaCompressor,
        level: i32,
        prefix: &[u8],
        bases: Vec<ObjectId>,
    ) -> std::io::Result<EncodedFrame> {
        let invalid =
            |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidInput, what.to_string());
        if self.objects.iter().any(|o| o.1 != ObjectKind::Chunk) {
            return Err(invalid("a delta frame holds chunks only"));
        }
        if bases.is_empty() || bases.len() > format::MAX_DELTA_BASES {
            return Err(invalid("a delta frame lists 1 to 8 bases"));
        }
        if prefix.len() as u64 > format::MAX_DELTA_PREFIX
            || self.raw.len() as u64 > u64::from(format::MAX_DELTA_RAW)
        {
            return Err(invalid(
                "a delta frame's prefix or raw bytes are over the format's limit",
            ));
        }
        let stored = compressor.compress(level, prefix, &self.raw)?;
        let raw_length = self.raw.len() as u32;
        self.raw.clear();
        Ok(EncodedFrame {
            stored,
            raw_length,
            compression: Compression::Delta,
            objects: std::mem::take(&mut self.objects),
            bases,
        })
    }
}

/// Compresses delta frames: zstd (RFC 8878) with a reference prefix (`ZSTD_CCtx_refPrefix`),
/// so matches may point into the prefix as into a dictionary of raw content. Reuse one per
/// thread: it keeps its output buffer.
#[derive(Default)]
pub struct DeltaCompressor {
    output: Vec<u8>,
}

impl DeltaCompressor {
    /// One zstd frame of `raw` at `level` against `prefix`, with a window that covers the
    /// prefix and the frame (at most 2^[`format::DELTA_WINDOW_LOG_MAX`] bytes, the most a
    /// reader accepts).
    ///
    /// # Errors
    /// zstd's error, as `std::io::Error`.
    pub fn compress(&mut self, level: i32, prefix: &[u8], raw: &[u8]) -> std::io::Result<Vec<u8>> {
        use zstd::zstd_safe::{CCtx, CParameter};
        let zstd_error =
            |code: usize| std::io::Error::other(zstd::zstd_safe::get_error_name(code).to_string());
        let span = (prefix.len() + raw.len()).max(1) as u64;
        let window_log = (64 - (span - 1).leading_zeros()).clamp(10, format::DELTA_WINDOW_LOG_MAX);
        let mut context = CCtx::create();
        context
            .set_parameter(CParameter::CompressionLevel(level))
            .map_err(zstd_error)?;
        context
            .set_parameter(CParameter::WindowLog(window_log))
            .map_err(zstd_error)?;
        context.ref_prefix(prefix).map_err(zstd_error)?;
        self.output.clear();
        self.output
            .reserve(zstd::zstd_safe::compress_bound(raw.len()));
        context
            .compress2(&mut self.output, raw)
            .map_err(zstd_error)?;
        Ok(self.output.clone())
    }
}

/// Decompresses one delta frame's stored bytes against `prefix` into `buffer` (replacing its
/// contents), refusing a frame that asks for a window over 2^[`format::DELTA_WINDOW_LOG_MAX`]
/// bytes or decompresses past `raw_length` (the caller bounds `raw_length` first and checks
/// the output's length after). Public so the decoding can be fuzzed.
///
/// The window is checked from the frame's header ([`declared_window`]) before zstd runs: a
/// one-shot decompression into a buffer (as here) does not apply zstd's `WindowLogMax`, which
/// only bounds streaming decoders, so without this check a frame asking for any window would
/// be decoded.
///
/// # Errors
/// zstd's error, as `std::io::Error`; `InvalidData` for a window over the cap.
pub fn decompress_delta_frame(
    stored: &[u8],
    prefix: &[u8],
    raw_length: u32,
    buffer: &mut Vec<u8>,
) -> std::io::Result<()> {
    use zstd::zstd_safe::{DCtx, DParameter};
    let zstd_error =
        |code: usize| std::io::Error::other(zstd::zstd_safe::get_error_name(code).to_string());
    let cap = 1u64 << format::DELTA_WINDOW_LOG_MAX;
    if let Some(window) = declared_window(stored).filter(|w| *w > cap) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "the frame asks for a window of {window} bytes, more than the {cap} a delta frame may use"
            ),
        ));
    }
    let mut context = DCtx::create();
    context
        .set_parameter(DParameter::WindowLogMax(format::DELTA_WINDOW_LOG_MAX))
        .map_err(zstd_error)?;
    context.ref_prefix(prefix).map_err(zstd_error)?;
    buffer.clear();
    buffer.reserve(raw_length as usize);
    context.decompress(buffer, stored).map_err(zstd_error)?;
    Ok(())
}

/// The window size in bytes the header of the zstd frame at the start of `stored` declares
/// (RFC 8878, section 3.1.1.1): from its window descriptor, or, for a single-segment frame,
/// its content size. `None` when `stored` does not start with a whole zstd frame header (zstd
/// then refuses it itself).
pub fn declared_window(stored: &[u8]) -> Option<u64> {
    const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
    if stored.get(..4)? != ZSTD_MAGIC {
        return None;
    }
    let descriptor = *stored.get(4)?;
    if descriptor & 0x20 == 0 {
        // Window descriptor: exponent (high 5 bits) and mantissa (low 3 bits).
        let window = *stored.get(5)?;
        let base = 1u64 << (10 + u32::from(window >> 3));
        return Some(base + base / 8 * u64::from(window & 7));
    }
    // Single segment: the window is the content size, after the dictionary id.
    let dictionary_id_len = [0, 1, 2, 4][usize::from(descriptor & 3)];
    let size_len = [1, 2, 4, 8][usize::from(descriptor >> 6)];
    let start = 5 + dictionary_id_len;
    let field = stored.get(start..start + size_len)?;
    let size = field
        .iter()
        .rev()
        .fold(0u64, |size, byte| (size << 8) | u64::from(*byte));
    Some(if size_len == 2 { size + 256 } else { size })
}

/// A frame ready to append to a pack.
pub struct EncodedFrame {
    stored: Vec<u8>,
    raw_length: u32,
    compression: Compression,
    objects: Vec<(ObjectId, ObjectKind, u32, u32)>,
    /// The delta frame's bases in prefix order; empty for a plain frame.
    bases: Vec<ObjectId>,
}

impl EncodedFrame {
    /// Stored bytes (after compression).
    pub fn stored_len(&self) -> usize {
        self.stored.len()
    }

    /// Raw bytes (before compression).
    pub fn raw_len(&self) -> u32 {
        self.raw_length
    }

    /// The bases of a delta frame, in prefix order; empty for a plain frame.
    pub fn bases(&self) -> &[ObjectId] {
        &self.bases
    }

    /// A delta frame received from elsewhere (a remote's pack), kept byte for byte, after
    /// checking it as [`EncodedFrame::verified`] does, decoding it against `prefix` (the raw
    /// bytes of `bases`, end to end, each already checked against its id by the caller): its
    /// base count and raw length within the format's limits, every object a chunk that hashes
    /// to its id.
    ///
    /// # Errors
    /// A description of the first failed check.
    pub fn verified_delta(
        stored: Vec<u8>,
        raw_length: u32,
        objects: Vec<(ObjectId, ObjectKind, u32, u32)>,
        bases: Vec<ObjectId>,
        prefix: &[u8],
    ) -> std::result::Result<(EncodedFrame, Vec<u8>), String> {
        if bases.is_empty() || bases.len() > format::MAX_DELTA_BASES {
            return Err("a delta frame lists 1 to 8 bases".into());
        }
        if raw_length > format::MAX_DELTA_RAW || prefix.len() as u64 > format::MAX_DELTA_PREFIX {
            return Err("delta frame larger than the format allows".into());
        }
        if stored.len() as u64 > format::max_stored_len(raw_length, Compression::Delta) {
            return Err(format!(
                "frame stores {} bytes for {raw_length} raw bytes",
                stored.len()
            ));
        }
        let mut raw = Vec::new();
        decompress_delta_frame(&stored, prefix, raw_length, &mut raw)
            .map_err(|e| format!("delta frame does not decompress against its bases: {e}"))?;
        if raw.len() != raw_length as usize {
            return Err("frame does not have its recorded length".into());
        }
        for &(id, kind, offset, length) in &objects {
            if kind != ObjectKind::Chunk {
                return Err("a delta frame holds chunks only".into());
            }
            let data = raw
                .get(offset as usize..offset as usize + length as usize)
                .ok_or("an object lies outside its frame")?;
            kind.check(&id, data)?;
        }
        Ok((
            EncodedFrame {
                stored,
                raw_length,
                compression: Compression::Delta,
                objects,
                bases,
            },
            raw,
        ))
    }

    /// A frame received from elsewhere (a remote's pack), kept byte for byte, after checking
    /// it: its stored length is within `super::format::max_stored_len`, it decompresses to
    /// exactly `raw_length` bytes (at most [`MAX_FRAME_RAW`]), and every object lies inside
    /// it and passes [`ObjectKind::check`]: chunks, trees, versions and provenance hash to
    /// their ids, an outboard's values merge to its file id, and every object but a chunk
    /// decodes (a file map, keyed by its file's id, is proven when the file is read).
    ///
    /// `objects` are (id, kind, offset, length) in the frame's raw bytes.
    ///
    /// # Errors
    /// A description of the first failed check.
    ///
    /// [`MAX_FRAME_RAW`]: super::format::MAX_FRAME_RAW
    pub fn verified(
        stored: Vec<u8>,
        raw_length: u32,
        compression: Compression,
        objects: Vec<(ObjectId, ObjectKind, u32, u32)>,
    ) -> std::result::Result<EncodedFrame, String> {
        Self::check(stored, raw_length, compression, objects, false).map(|(frame, _)| frame)
    }

    /// As [`EncodedFrame::verified`], also giving the frame's raw (decompressed) bytes, for
    /// a reader that serves them at once.
    ///
    /// # Errors
    /// As [`EncodedFrame::verified`].
    pub fn verified_with_raw(
        stored: Vec<u8>,
        raw_length: u32,
        compression: Compression,
        objects: Vec<(ObjectId, ObjectKind, u32, u32)>,
    ) -> std::result::Result<(EncodedFrame, Vec<u8>), String> {
        Self::check(stored, raw_length, compression, objects, true)
            .map(|(frame, raw)| (frame, raw.unwrap_or_default()))
    }

    fn check(
        stored: Vec<u8>,
        raw_length: u32,
        compression: Compression,
        objects: Vec<(ObjectId, ObjectKind, u32, u32)>,
        keep_raw: bool,
    ) -> std::result::Result<(EncodedFrame, Option<Vec<u8>>), String> {
        if raw_length > super::format::MAX_FRAME_RAW {
            return Err("frame larger than the format allows".into());
        }
        if stored.len() as u64 > super::format::max_stored_len(raw_length, compression) {
            return Err(format!(
                "frame stores {} bytes for {raw_length} raw bytes",
                stored.len()
            ));
        }
        let decompressed = match compression {
            Compression::None => None,
            Compression::Delta => {
                return Err("a delta frame is checked against its bases (verified_delta)".into());
            }
            Compression::Zstd => Some(
                zstd::bulk::decompress(&stored, raw_length as usize)
                    .map_err(|e| format!("frame does not decompress: {e}"))?,
            ),
        };
        let raw: &[u8] = decompressed.as_deref().unwrap_or(&stored);
        if raw.len() != raw_length as usize {
            return Err("frame does not have its recorded length".into());
        }
        for &(id, kind, offset, length) in &objects {
            let data = raw
                .get(offset as usize..offset as usize + length as usize)
                .ok_or("an object lies outside its frame")?;
            // Metadata must also decode, within the format's limits: nothing malformed is kept.
            kind.check(&id, data)?;
        }
        let raw = keep_raw.then(|| decompressed.unwrap_or_else(|| stored.clone()));
        Ok((
            EncodedFrame {
                stored,
                raw_length,
                compression,
                objects,
                bases: Vec::new(),
            },
            raw,
        ))
    }
}

/// Appends frames to a temporary file and seals it into an immutable, content-named pack.
/// A measuring writer ([`PackWriter::measuring`]) writes nowhere: it computes the pack's id
/// and size as if it had written it (gc's dry run).
pub struct PackWriter {
    packs_dir: PathBuf,
    temp_path: PathBuf,
    /// `None` for a measuring writer and an in-memory one.
    file: Option<BufWriter<File>>,
    /// The pack's bytes, for a writer in memory ([`PackWriter::in_memory`]).
    memory: Option<Vec<u8>>,
    hasher: blake3::Hasher,
    offset: u64,
    frames: Vec<FrameRecord>,
    objects: Vec<ObjectRecord>,
    /// The bases of the delta frames added so far, by frame.
    deltas: Vec<FrameBases>,
    /// Set once renamed to its final name; until then, dropping the writer deletes the file.
    sealed: bool,
}

impl Drop for PackWriter {
    fn drop(&mut self) {
        if !self.sealed && self.file.is_some() {
            let _ = fs::remove_file(&self.temp_path);
        }
    }
}

/// A pack written durably under its final name.
#[derive(Debug)]
pub struct SealedPack {
    /// BLAKE3 of the whole file; also its file name (`<id>.pack`).
    pub id: ObjectId,
    /// Its size in bytes.
    pub size: u64,
    /// Its frames, in file order.
    pub frames: Vec<FrameRecord>,
    /// Its objects, in file order.
    pub objects: Vec<ObjectRecord>,
    /// The bases of its delta frames, by frame index (empty for a pack with an index 1).
    pub deltas: Vec<FrameBases>,
}

impl SealedPack {
    /// The bases of frame `frame` of this pack (empty for a plain frame).
    pub fn bases_of(&self, frame: u32) -> &[ObjectId] {
        self.deltas
            .binary_search_by_key(&frame, |d| d.frame)
            .map_or(&[], |i| self.deltas[i].bases.as_slice())
    }
}

/// A pack sealed on disk, named without its index: what a writer of many packs keeps until
/// its catalog transaction, which reads each index back ([`PackFile::read_index`]) one pack
/// at a time. Holding every sealed pack's index took about 50 bytes an object (a first
/// commit of a million tiny files held 50 MB of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackFile {
    /// BLAKE3 of the whole file; also its file name (`<id>.pack`).
    pub id: ObjectId,
    /// Its size in bytes.
    pub size: u64,
}

impl From<&SealedPack> for PackFile {
    fn from(pack: &SealedPack) -> PackFile {
        PackFile {
            id: pack.id,
            size: pack.size,
        }
    }
}

impl PackWriter {
    /// Starts a pack as a temporary file in `temp_dir`; it is renamed into `packs_dir` by
    /// [`PackWriter::finish`] (both must be on one filesystem).
    ///
    /// # Errors
    /// [`crate::Error::Io`] when the file cannot be created or written.
    pub fn create(packs_dir: &Path, temp_dir: &Path) -> Result<Self> {
        let temp = tempfile::Builder::new()
            .prefix(&format!("pack-{}-", std::process::id()))
            .suffix(".tmp")
            .tempfile_in(temp_dir)
            .at(temp_dir)?;
        let (file, temp_path) = temp.keep().map_err(|e| e.error).at(temp_dir)?;
        let mut writer = PackWriter {
            packs_dir: packs_dir.to_path_buf(),
            temp_path,
            file: Some(BufWriter::with_capacity(1 << 20, file)),
            memory: None,
            hasher: blake3::Hasher::new(),
            offset: 0,
            frames: Vec::new(),
            objects: Vec::new(),
            deltas: Vec::new(),
            sealed: false,
        };
        writer.write_header()?;
        Ok(writer)
    }

    /// A writer that writes no file: [`PackWriter::finish`] returns the id and size the pack
    /// would have, byte for byte, had [`PackWriter::create`] written the same frames.
    pub fn measuring() -> Self {
        let mut writer = PackWriter {
            packs_dir: PathBuf::new(),
            temp_path: PathBuf::new(),
            file: None,
            memory: None,
            hasher: blake3::Hasher::new(),
            offset: 0,
            frames: Vec::new(),
            objects: Vec::new(),
            deltas: Vec::new(),
            sealed: false,
        };
        writer
            .write_header()
            .expect("a measuring writer performs no I/O");
        writer
    }

    /// A writer that keeps the pack in memory, for a pack that goes straight to a remote
    /// (`dsv copy` packs the frames it takes from a pack partly needed without touching the
    /// local disk). [`PackWriter::finish_in_memory`] gives the pack's bytes, exactly those
    /// [`PackWriter::create`] would have written for the same frames.
    pub fn in_memory() -> Self {
        let mut writer = PackWriter {
            packs_dir: PathBuf::new(),
            temp_path: PathBuf::new(),
            file: None,
            memory: Some(Vec::with_capacity(1 << 20)),
            hasher: blake3::Hasher::new(),
            offset: 0,
            frames: Vec::new(),
            objects: Vec::new(),
            deltas: Vec::new(),
            sealed: false,
        };
        writer
            .write_header()
            .expect("an in-memory writer performs no I/O");
        writer
    }

    /// Seals an in-memory pack ([`PackWriter::in_memory`]): its index and trailer are
    /// appended, and the pack is returned with its bytes (the `.idx` a remote keeps beside
    /// it is the last `size - index offset` bytes: [`crate::pack::reader::parse_tail`]).
    /// For a writer not in memory, the bytes are empty.
    ///
    /// # Errors
    /// None in memory; as [`PackWriter::finish`] otherwise.
    pub fn finish_in_memory(mut self) -> Result<(SealedPack, Vec<u8>)> {
        let sealed = self.seal()?;
        Ok((sealed, self.memory.take().unwrap_or_default()))
    }

    fn write_header(&mut self) -> Result<()> {
        let mut header = Vec::with_capacity(format::HEADER_LEN as usize);
        header.extend_from_slice(format::MAGIC);
        header.extend_from_slice(&format::FORMAT_VERSION.to_le_bytes());
        header.extend_from_slice(&[0; 4]);
        self.write(&header)
    }

    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        if let Some(file) = &mut self.file {
            file.write_all(bytes).at(&self.temp_path)?;
        }
        if let Some(memory) = &mut self.memory {
            memory.extend_from_slice(bytes);
        }
        self.hasher.update(bytes);
        self.offset += bytes.len() as u64;
        Ok(())
    }

    /// Appends a frame and records its objects in the index.
    ///
    /// # Errors
    /// [`crate::Error::Io`] on a write failure (a full disk, for one).
    pub fn add_frame(&mut self, frame: EncodedFrame) -> Result<()> {
        let index = self.frames.len() as u32;
        self.frames.push(FrameRecord {
            offset: self.offset,
            stored_length: frame.stored.len() as u32,
            raw_length: frame.raw_length,
            compression: frame.compression,
        });
        if !frame.bases.is_empty() {
            self.deltas.push(FrameBases {
                frame: index,
                bases: frame.bases,
            });
        }
        for (id, kind, offset, length) in frame.objects {
            self.objects.push(ObjectRecord {
                id,
                kind,
                frame: index,
                offset,
                length,
            });
        }
        self.write(&frame.stored)
    }

    /// True when `frame` can join this pack without its index passing
    /// `format::MAX_PACK_FRAMES` frames or `format::MAX_PACK_OBJECTS` objects (an empty
    /// pack takes any frame a reader accepts).
    pub fn fits(&self, frame: &EncodedFrame) -> bool {
        self.frames.is_empty()
            || (self.frames.len() < format::MAX_PACK_FRAMES as usize
                && self.objects.len() + frame.objects.len() <= format::MAX_PACK_OBJECTS as usize)
    }

    /// Objects indexed so far.
    pub fn object_count(&self) -> usize {
        self.objects.len()
    }

    /// Bytes written so far.
    pub fn size(&self) -> u64 {
        self.offset
    }

    /// True when no frame was added.
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Writes the index and trailer, flushes and fsyncs the file, renames it to
    /// `<packs_dir>/<id>.pack` and fsyncs the directory: when this returns, the pack survives
    /// a crash, so the catalog may name it.
    ///
    /// # Errors
    /// [`crate::Error::Io`]; the temporary file is removed (as it is whenever an unsealed
    /// writer is dropped).
    pub fn finish(mut self) -> Result<SealedPack> {
        self.seal()
    }

    fn seal(&mut self) -> Result<SealedPack> {
        let index = format::encode_index(&self.frames, &self.objects, &self.deltas);
        let index_offset = self.offset;
        self.write(&index)?;
        let mut trailer = Vec::with_capacity(format::TRAILER_LEN as usize);
        trailer.extend_from_slice(&index_offset.to_le_bytes());
        trailer.extend_from_slice(&(index.len() as u64).to_le_bytes());
        trailer.extend_from_slice(blake3::hash(&index).as_bytes());
        let version = if self.deltas.is_empty() { 1 } else { 2 };
        trailer.extend_from_slice(format::end_magic(version));
        self.write(&trailer)?;
        let id = ObjectId::from(self.hasher.finalize());
        if let Some(file) = &mut self.file {
            file.flush().at(&self.temp_path)?;
            // Immutable from now on, and readable by everyone who may read the store.
            use std::os::unix::fs::PermissionsExt;
            file.get_ref()
                .set_permissions(fs::Permissions::from_mode(0o444))
                .at(&self.temp_path)?;
            file.get_ref().sync_all().at(&self.temp_path)?;
            let final_path = pack_path(&self.packs_dir, &id);
            fs::rename(&self.temp_path, &final_path).at(&final_path)?;
            self.sealed = true;
            File::open(&self.packs_dir)
                .and_then(|dir| dir.sync_all())
                .at(&self.packs_dir)?;
        }
        Ok(SealedPack {
            id,
            size: self.offset,
            frames: std::mem::take(&mut self.frames),
            objects: std::mem::take(&mut self.objects),
            deltas: std::mem::take(&mut self.deltas),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    /// Bytes zstd cannot shrink (BLAKE3's extendable output).
    fn noise(len: usize, seed: u32) -> Vec<u8> {
        let mut out = vec![0; len];
        blake3::Hasher::new()
            .update(&seed.to_le_bytes())
            .finalize_xof()
            .fill(&mut out);
        out
    }

    fn chunk_frame(chunks: &[&[u8]]) -> EncodedFrame {
        let mut builder = FrameBuilder::default();
        for chunk in chunks {
            builder.push(ObjectId::of(chunk), ObjectKind::Chunk, chunk);
        }
        builder.encode(3)
    }

    /// A pack of two frames (one compressed, one stored as is) in `dir`: its seal and bytes.
    fn two_frame_pack(dir: &Path) -> (SealedPack, Vec<u8>) {
        let mut writer = PackWriter::create(dir, dir).unwrap();
        let text = b"the same line again\n".repeat(200);
        writer.add_frame(chunk_frame(&[&text, b"tail"])).unwrap();
        writer.add_frame(chunk_frame(&[&noise(3000, 1)])).unwrap();
        let sealed = writer.finish().unwrap();
        let bytes = fs::read(pack_path(dir, &sealed.id)).unwrap();
        (sealed, bytes)
    }

    #[test]
    fn a_pack_file_name_gives_back_its_id_and_no_other_name_does() {
        let id = ObjectId::of(b"a pack");
        let path = pack_path(Path::new("/s/packs"), &id);
        let name = path.file_name().unwrap().to_str().unwrap();
        assert_eq!(pack_id_of(name), Some(id));
        for other in [
            "x.pack",
            "pack-1-2.tmp",
            &format!("{id}.idx"),
            &format!("{id}.pack.tmp"),
        ] {
            assert_eq!(pack_id_of(other), None, "{other}");
        }
    }

    #[test]
    fn a_sealed_packs_name_and_id_are_the_blake3_of_its_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let (sealed, bytes) = two_frame_pack(dir.path());
        assert_eq!(sealed.id, ObjectId::of(&bytes));
        assert_eq!(sealed.size, bytes.len() as u64);
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, [format!("{}.pack", ObjectId::of(&bytes))]);
    }

    #[test]
    fn a_pack_has_the_documented_header_index_and_trailer() {
        let dir = tempfile::tempdir().unwrap();
        let (sealed, bytes) = two_frame_pack(dir.path());
        assert_eq!(&bytes[..8], format::MAGIC);
        assert_eq!(&bytes[8..12], &format::FORMAT_VERSION.to_le_bytes());
        assert_eq!(&bytes[12..16], &[0; 4]);
        let trailer = &bytes[bytes.len() - format::TRAILER_LEN as usize..];
        let index_offset = u64::from_le_bytes(trailer[0..8].try_into().unwrap()) as usize;
        let index_len = u64::from_le_bytes(trailer[8..16].try_into().unwrap()) as usize;
        let index = &bytes[index_offset..index_offset + index_len];
        assert_eq!(index_offset + index_len + trailer.len(), bytes.len());
        assert_eq!(
            index,
            format::encode_index(&sealed.frames, &sealed.objects, &[])
        );
        assert_eq!(&trailer[16..48], blake3::hash(index).as_bytes());
        assert_eq!(&trailer[48..], format::END_MAGIC);
        // Frames lie back to back from the header to the index.
        let mut next = format::HEADER_LEN;
        for frame in &sealed.frames {
            assert_eq!(frame.offset, next);
            next += u64::from(frame.stored_length);
        }
        assert_eq!(next, index_offset as u64);
    }

    #[test]
    fn a_frame_is_compressed_only_when_that_shrinks_it() {
        let text = b"abcabcabc".repeat(1000);
        let compressed = chunk_frame(&[&text]);
        assert_eq!(compressed.compression, Compression::Zstd);
        assert!(compressed.stored_len() < text.len());
        assert_eq!(compressed.raw_length as usize, text.len());
        let random = noise(5000, 7);
        let raw = chunk_frame(&[&random]);
        assert_eq!(raw.compression, Compression::None);
        assert_eq!(raw.stored, random);
        assert_eq!(raw.raw_length, 5000);
    }

    #[test]
    fn a_frame_builder_places_objects_back_to_back_and_empties_on_encode() {
        let mut builder = FrameBuilder::with_capacity(16);
        assert!(builder.is_empty());
        let (a, b, c) = (b"first".as_slice(), b"".as_slice(), b"third!".as_slice());
        for bytes in [a, b, c] {
            builder.push(ObjectId::of(bytes), ObjectKind::Chunk, bytes);
        }
        assert!(!builder.is_empty());
        assert_eq!(builder.len(), 11);
        let frame = builder.encode(3);
        assert_eq!(
            frame.objects,
            [
                (ObjectId::of(a), ObjectKind::Chunk, 0, 5),
                (ObjectId::of(b), ObjectKind::Chunk, 5, 0),
                (ObjectId::of(c), ObjectKind::Chunk, 5, 6),
            ]
        );
        assert!(builder.is_empty());
        assert_eq!(builder.len(), 0);
    }

    #[test]
    fn the_index_records_each_frames_objects_under_its_frame_number() {
        let dir = tempfile::tempdir().unwrap();
        let (sealed, bytes) = two_frame_pack(dir.path());
        let frames: Vec<u32> = sealed.objects.iter().map(|o| o.frame).collect();
        assert_eq!(frames, [0, 0, 1]);
        // The stored bytes of each frame are the encoder's output, at the recorded offset.
        let second = &sealed.frames[1];
        assert_eq!(second.compression, Compression::None);
        let start = second.offset as usize;
        assert_eq!(
            &bytes[start..start + second.stored_length as usize],
            noise(3000, 1)
        );
    }

    #[test]
    fn a_verified_frame_is_checked_before_it_is_kept() {
        let data = b"some chunk bytes".repeat(50);
        let id = ObjectId::of(&data);
        let stored = zstd::bulk::compress(&data, 3).unwrap();
        let raw_length = data.len() as u32;
        let objects = vec![(id, ObjectKind::Chunk, 0, raw_length)];
        let (frame, raw) = EncodedFrame::verified_with_raw(
            stored.clone(),
            raw_length,
            Compression::Zstd,
            objects.clone(),
        )
        .unwrap();
        assert_eq!(raw, data);
        assert_eq!(frame.stored, stored);
        assert!(
            EncodedFrame::verified(data.clone(), raw_length, Compression::None, objects.clone())
                .is_ok()
        );
        let refused = |stored: Vec<u8>, raw: u32, compression, objects| {
            EncodedFrame::verified(stored, raw, compression, objects).is_err()
        };
        // Claimed lengths.
        assert!(refused(
            vec![],
            format::MAX_FRAME_RAW + 1,
            Compression::None,
            vec![]
        ));
        assert!(refused(vec![0; 11], 10, Compression::None, vec![]));
        assert!(refused(
            data.clone(),
            raw_length + 1,
            Compression::None,
            vec![]
        ));
        assert!(refused(
            stored.clone(),
            raw_length - 1,
            Compression::Zstd,
            vec![]
        ));
        assert!(refused(
            stored.clone(),
            raw_length + 1,
            Compression::Zstd,
            vec![]
        ));
        assert!(refused(b"not zstd".to_vec(), 8, Compression::Zstd, vec![]));
        // Objects.
        let outside = vec![(id, ObjectKind::Chunk, 1, raw_length)];
        assert!(refused(
            stored.clone(),
            raw_length,
            Compression::Zstd,
            outside
        ));
        let misnamed = vec![(ObjectId::of(b"other"), ObjectKind::Chunk, 0, raw_length)];
        assert!(refused(
            stored.clone(),
            raw_length,
            Compression::Zstd,
            misnamed
        ));
        let not_a_tree = vec![(id, ObjectKind::Tree, 0, raw_length)];
        assert!(refused(stored, raw_length, Compression::Zstd, not_a_tree));
    }

    #[test]
    fn a_sealed_pack_is_read_only_and_leaves_no_temporary_file() {
        use std::os::unix::fs::PermissionsExt;
        let packs = tempfile::tempdir().unwrap();
        let temp = tempfile::tempdir().unwrap();
        let mut writer = PackWriter::create(packs.path(), temp.path()).unwrap();
        assert_eq!(fs::read_dir(temp.path()).unwrap().count(), 1);
        writer.add_frame(chunk_frame(&[b"x"])).unwrap();
        let sealed = writer.finish().unwrap();
        assert_eq!(fs::read_dir(temp.path()).unwrap().count(), 0);
        let mode = fs::metadata(pack_path(packs.path(), &sealed.id))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o444);
    }

    #[test]
    fn a_writer_dropped_unsealed_removes_its_temporary_file() {
        let packs = tempfile::tempdir().unwrap();
        let temp = tempfile::tempdir().unwrap();
        let mut writer = PackWriter::create(packs.path(), temp.path()).unwrap();
        writer.add_frame(chunk_frame(&[b"abandoned"])).unwrap();
        assert_eq!(fs::read_dir(temp.path()).unwrap().count(), 1);
        drop(writer);
        assert_eq!(fs::read_dir(temp.path()).unwrap().count(), 0);
        assert_eq!(fs::read_dir(packs.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_writer_counts_its_objects_and_bytes_as_it_goes() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = PackWriter::create(dir.path(), dir.path()).unwrap();
        assert!(writer.is_empty());
        assert_eq!(writer.size(), format::HEADER_LEN);
        let frame = chunk_frame(&[b"one", b"two"]);
        let stored = frame.stored_len() as u64;
        assert!(writer.fits(&frame));
        writer.add_frame(frame).unwrap();
        assert!(!writer.is_empty());
        assert_eq!(writer.object_count(), 2);
        assert_eq!(writer.size(), format::HEADER_LEN + stored);
        let sealed = writer.finish().unwrap();
        let index_len = 8 + 24 + 2 * 48;
        assert_eq!(
            sealed.size,
            format::HEADER_LEN + stored + index_len + format::TRAILER_LEN
        );
    }

    #[test]
    fn a_pack_files_index_reads_back_as_sealed_and_a_size_mismatch_is_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let (sealed, _) = two_frame_pack(dir.path());
        let file = PackFile::from(&sealed);
        let read = file.read_index(dir.path()).unwrap();
        assert_eq!((read.id, read.size), (sealed.id, sealed.size));
        assert_eq!(read.frames, sealed.frames);
        assert_eq!(read.objects, sealed.objects);
        let wrong = PackFile {
            size: sealed.size + 1,
            ..file
        };
        assert!(matches!(
            wrong.read_index(dir.path()),
            Err(Error::Corrupt { .. })
        ));
    }

    /// One zstd frame of `raw` against `prefix` without its content size (so its header has
    /// a window descriptor), that descriptor then set to declare 2^`window_log` bytes.
    fn frame_declaring(prefix: &[u8], raw: &[u8], window_log: u32) -> Vec<u8> {
        use zstd::zstd_safe::{CCtx, CParameter};
        let mut context = CCtx::create();
        context
            .set_parameter(CParameter::ContentSizeFlag(false))
            .unwrap();
        context.ref_prefix(prefix).unwrap();
        let mut stored = Vec::with_capacity(zstd::zstd_safe::compress_bound(raw.len()));
        context.compress2(&mut stored, raw).unwrap();
        assert_eq!(stored[4] & 0x20, 0, "not single-segment");
        stored[5] = ((window_log - 10) << 3) as u8;
        stored
    }

    #[test]
    fn a_delta_frame_declaring_a_window_over_the_cap_is_refused_before_decoding() {
        let prefix = noise(20_000, 1);
        let mut raw = prefix.clone();
        raw[100] ^= 1;
        // The writer's frames are single-segment: their window is their content size.
        let written = DeltaCompressor::default()
            .compress(3, &prefix, &raw)
            .unwrap();
        assert_eq!(declared_window(&written), Some(raw.len() as u64));
        let mut out = Vec::new();
        decompress_delta_frame(&written, &prefix, raw.len() as u32, &mut out).unwrap();
        assert!(out == raw);
        // At the cap it decodes; one step over, it is refused, although zstd would decode it.
        let cap = format::DELTA_WINDOW_LOG_MAX;
        let at_cap = frame_declaring(&prefix, &raw, cap);
        assert_eq!(declared_window(&at_cap), Some(1 << cap));
        decompress_delta_frame(&at_cap, &prefix, raw.len() as u32, &mut out).unwrap();
        assert!(out == raw);
        let over = frame_declaring(&prefix, &raw, 30);
        assert_eq!(declared_window(&over), Some(1 << 30));
        let error = decompress_delta_frame(&over, &prefix, raw.len() as u32, &mut out).unwrap_err();
        assert!(error.to_string().contains("window"), "{error}");
        let mut context = zstd::zstd_safe::DCtx::create();
        context.ref_prefix(&prefix[..]).unwrap();
        let mut unchecked = Vec::with_capacity(raw.len());
        context.decompress(&mut unchecked, &over).unwrap();
        assert!(unchecked == raw, "only the window's size is wrong with it");
        // Not a zstd frame header: left to zstd, which refuses it.
        assert_eq!(declared_window(b"DSV"), None);
        assert!(decompress_delta_frame(b"not zstd", &prefix, 8, &mut out).is_err());
    }
}
