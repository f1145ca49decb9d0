//! The pack file's byte layout. All integers are little-endian.
//!
//! ```text
//! offset  size  field
//! 0       8     magic "DSVPACK1"
//! 8       4     header version (1)
//! 12      4     reserved, zero
//! 16      …     frames, back to back
//! I       …     index 1: frame_count u32, object_count u32,
//!               frame_count × FrameRecord (24 bytes), object_count × ObjectRecord (48 bytes)
//!               index 2: frame_count u32, object_count u32, base_count u32, zero u32,
//!               the same records, then base_count × base record (36 bytes)
//! end-56  8     index offset I
//! end-48  8     index length in bytes
//! end-40  32    BLAKE3 of the index bytes
//! end-8   8     magic "DSVPEND1" (index 1) or "DSVPEND2" (index 2)
//! ```
//!
//! Index 2 is written only by a pack holding a delta frame ([`Compression`] 2): a frame
//! compressed by zstd against a reference prefix made of the raw bytes of other chunks, its
//! bases, which the base records list (the prefix idea is zstd's `ZSTD_CCtx_refPrefix`; the
//! bounds on a chain are Mercurial's revlog rules: a depth cap, and a chunk's closure stored
//! in at most twice its raw bytes). The end magic tells the index's version from the tail
//! alone (a remote's `.idx`): a dsv that knows only index 1 stops on the magic.

use std::path::{Path, PathBuf};

use crate::id::ObjectId;
use crate::object::ObjectKind;

/// The first 8 bytes of every pack.
pub const MAGIC: &[u8; 8] = b"DSVPACK1";
/// The last 8 bytes of a pack whose index is version 1 (no delta frame).
pub const END_MAGIC: &[u8; 8] = b"DSVPEND1";
/// The last 8 bytes of a pack whose index is version 2 (it may list delta frames).
pub const END_MAGIC_DELTAS: &[u8; 8] = b"DSVPEND2";
/// The first 7 bytes of every end magic; the 8th is the index version as an ASCII digit.
pub(crate) const END_MAGIC_STEM: &[u8; 7] = b"DSVPEND";
/// The header version written in every pack (the header and frame layout, unchanged by
/// index 2).
pub const FORMAT_VERSION: u32 = 1;
/// The newest index version this dsv reads (the version of dsv that introduced it is
/// [`DELTAS_SINCE`]).
pub const INDEX_VERSION: u32 = 2;
/// The first dsv release that reads index 2 (delta frames): what a "needs dsv >= X" message
/// names.
pub const DELTAS_SINCE: &str = "0.2.0";
/// Bytes of one encoded base record (index 2): frame index u32, base chunk id.
pub const BASE_RECORD_LEN: usize = 36;
/// The most bases one delta frame may list.
pub const MAX_DELTA_BASES: usize = 8;
/// The most raw bytes of a delta frame's prefix (its bases' raw lengths together), checked
/// before the prefix is built (4 MiB).
pub const MAX_DELTA_PREFIX: u64 = 4 * 1024 * 1024;
/// The most raw bytes of a delta frame (4 MiB).
pub const MAX_DELTA_RAW: u32 = 4 * 1024 * 1024;
/// The most levels of bases a reader follows from a chunk (a deeper chain, or a cycle, is
/// corrupt). Writers keep far shorter chains (commit: 4).
pub const MAX_DELTA_DEPTH: u32 = 16;
/// zstd's `windowLogMax` on decoding a delta frame: a frame asking for a window over 16 MiB
/// is refused before zstd allocates it (a prefix and a frame are at most 8 MiB together).
pub const DELTA_WINDOW_LOG_MAX: u32 = 24;
/// Header length in bytes.
pub const HEADER_LEN: u64 = 16;
/// Trailer length in bytes.
pub const TRAILER_LEN: u64 = 56;
/// Bytes of one encoded [`FrameRecord`].
pub const FRAME_RECORD_LEN: usize = 24;
/// Bytes of one encoded [`ObjectRecord`].
pub const OBJECT_RECORD_LEN: usize = 48;
/// The largest raw frame a reader accepts, in bytes: a bound on decompression of corrupt
/// data. Writers keep frames near 1 MiB; only a single larger object makes a bigger frame: a
/// tree of a directory with about 4 million entries, or the file map of a file of about
/// 490 GB, would reach this limit (a known limit of format 1).
pub const MAX_FRAME_RAW: u32 = 256 * 1024 * 1024;

/// The most frames one pack may list (2^20 = 1,048,576). Writers seal a pack before it
/// would list more; readers refuse an index that claims more.
pub(crate) const MAX_PACK_FRAMES: u32 = 1 << 20;
/// The most objects one pack may list (2^22 = 4,194,304). Writers seal a pack before it
/// would list more; readers refuse an index that claims more.
pub(crate) const MAX_PACK_OBJECTS: u32 = 1 << 22;
/// The longest index a reader accepts, in bytes: `MAX_PACK_FRAMES` frame records and
/// `MAX_PACK_OBJECTS` object records after the 8-byte counts (about 216 MiB).
pub const MAX_INDEX_LEN: u64 = 8
    + MAX_PACK_FRAMES as u64 * FRAME_RECORD_LEN as u64
    + MAX_PACK_OBJECTS as u64 * OBJECT_RECORD_LEN as u64;

/// The most stored bytes a frame of `raw_length` raw bytes may take: exactly `raw_length`
/// when stored as is, and zstd's worst-case bound (`ZSTD_compressBound`, a little over
/// `raw_length`) when compressed. A reader refuses a frame record claiming more, before it
/// allocates or downloads anything for it.
pub(crate) fn max_stored_len(raw_length: u32, compression: Compression) -> u64 {
    match compression {
        Compression::None => u64::from(raw_length),
        Compression::Zstd | Compression::Delta => {
            zstd::zstd_safe::compress_bound(raw_length as usize) as u64
        }
    }
}

/// How a frame's bytes are stored (one byte in the index).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Compression {
    /// Stored as is (the data did not shrink).
    None = 0,
    /// One zstd frame (RFC 8878).
    Zstd = 1,
    /// One zstd frame compressed against a reference prefix: the raw bytes of the frame's
    /// bases (chunks listed in the index), end to end in listed order. Index 2 only; the
    /// frame holds chunks only.
    Delta = 2,
}

impl Compression {
    /// Parses the index byte.
    pub fn from_u8(value: u8) -> Option<Self> {
        match value {
            0 => Some(Compression::None),
            1 => Some(Compression::Zstd),
            2 => Some(Compression::Delta),
            _ => None,
        }
    }
}

/// Where a frame lies in its pack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameRecord {
    /// Byte offset of the stored frame from the start of the pack.
    pub offset: u64,
    /// Stored (possibly compressed) length in bytes.
    pub stored_length: u32,
    /// Length in bytes after decompression.
    pub raw_length: u32,
    /// How the frame is stored.
    pub compression: Compression,
}

impl FrameRecord {
    /// Appends the 24-byte encoding: offset u64, stored u32, raw u32, compression u8, 7 zero bytes.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.offset.to_le_bytes());
        out.extend_from_slice(&self.stored_length.to_le_bytes());
        out.extend_from_slice(&self.raw_length.to_le_bytes());
        out.push(self.compression as u8);
        out.extend_from_slice(&[0; 7]);
    }

    /// Parses 24 bytes; `None` when the compression byte is unknown.
    pub fn decode(bytes: &[u8; FRAME_RECORD_LEN]) -> Option<Self> {
        Some(FrameRecord {
            offset: u64::from_le_bytes(bytes[0..8].try_into().ok()?),
            stored_length: u32::from_le_bytes(bytes[8..12].try_into().ok()?),
            raw_length: u32::from_le_bytes(bytes[12..16].try_into().ok()?),
            compression: Compression::from_u8(bytes[16])?,
        })
    }
}

/// Where an object lies: in which frame of the pack, at which offset of the frame's raw bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectRecord {
    /// The object's id (for a file map: the file id).
    pub id: ObjectId,
    /// What it is.
    pub kind: ObjectKind,
    /// Index of its frame in the pack's frame list.
    pub frame: u32,
    /// Byte offset inside the frame's raw bytes.
    pub offset: u32,
    /// Length in bytes.
    pub length: u32,
}

impl ObjectRecord {
    /// Appends the 48-byte encoding: id, kind u8, 3 zero bytes, frame u32, offset u32, length u32.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.id.0);
        out.push(self.kind as u8);
        out.extend_from_slice(&[0; 3]);
        out.extend_from_slice(&self.frame.to_le_bytes());
        out.extend_from_slice(&self.offset.to_le_bytes());
        out.extend_from_slice(&self.length.to_le_bytes());
    }

    /// Parses 48 bytes; `None` when the kind byte is unknown.
    pub fn decode(bytes: &[u8; OBJECT_RECORD_LEN]) -> Option<Self> {
        Some(ObjectRecord {
            id: ObjectId::from_slice(&bytes[0..32])?,
            kind: ObjectKind::from_u8(bytes[32])?,
            frame: u32::from_le_bytes(bytes[36..40].try_into().ok()?),
            offset: u32::from_le_bytes(bytes[40..44].try_into().ok()?),
            length: u32::from_le_bytes(bytes[44..48].try_into().ok()?),
        })
    }
}

/// The bases of one delta frame of a pack (index 2): the chunks whose raw bytes, end to end in
/// this order, are the frame's zstd reference prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameBases {
    /// Index of the frame in the pack's frame list.
    pub frame: u32,
    /// The base chunks' ids, in prefix order (1 to [`MAX_DELTA_BASES`]).
    pub bases: Vec<ObjectId>,
}

/// A pack's decoded index: its frames and objects, and the bases of its delta frames.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PackIndex {
    /// The frames, in file order.
    pub frames: Vec<FrameRecord>,
    /// The objects, in file order.
    pub objects: Vec<ObjectRecord>,
    /// The bases of each delta frame, by frame index, ascending (empty in an index 1).
    pub deltas: Vec<FrameBases>,
}

impl PackIndex {
    /// The bases of frame `frame` (empty for a frame that is not a delta).
    pub fn bases_of(&self, frame: u32) -> &[ObjectId] {
        self.deltas
            .binary_search_by_key(&frame, |d| d.frame)
            .map_or(&[], |i| self.deltas[i].bases.as_slice())
    }

    /// The index version the pack's end magic names: 2 when a frame is a delta, else 1.
    pub fn version(&self) -> u32 {
        if self.deltas.is_empty() { 1 } else { 2 }
    }
}

/// The end magic of an index of `version` (1 or 2).
pub fn end_magic(version: u32) -> &'static [u8; 8] {
    if version >= 2 {
        END_MAGIC_DELTAS
    } else {
        END_MAGIC
    }
}

/// The index version an end magic names: `Ok(1)` or `Ok(2)`; `Err(Some(n))` for a later
/// version `n` this dsv does not know (the pack needs a newer dsv); `Err(None)` when it is
/// not a dsv end magic at all.
pub fn index_version_of(end_magic: &[u8]) -> std::result::Result<u32, Option<u32>> {
    if end_magic.len() != 8 || &end_magic[..7] != END_MAGIC_STEM {
        return Err(None);
    }
    match end_magic[7] {
        b'1' => Ok(1),
        b'2' => Ok(2),
        digit @ b'3'..=b'9' => Err(Some(u32::from(digit - b'0'))),
        _ => Err(None),
    }
}

/// The message for a pack whose index version is newer than this dsv reads.
pub fn newer_index_message(version: u32) -> String {
    format!(
        "pack index version {version} is newer than this dsv reads (it reads up to {INDEX_VERSION}): upgrade dsv"
    )
}

/// Encodes a pack index: version 1 when `deltas` is empty, else version 2 with its base
/// records (the caller writes the matching [`end_magic`]).
pub fn encode_index(
    frames: &[FrameRecord],
    objects: &[ObjectRecord],
    deltas: &[FrameBases],
) -> Vec<u8> {
    let base_count: usize = deltas.iter().map(|d| d.bases.len()).sum();
    let mut out = Vec::with_capacity(
        16 + frames.len() * FRAME_RECORD_LEN
            + objects.len() * OBJECT_RECORD_LEN
            + base_count * BASE_RECORD_LEN,
    );
    out.extend_from_slice(&(frames.len() as u32).to_le_bytes());
    out.extend_from_slice(&(objects.len() as u32).to_le_bytes());
    if !deltas.is_empty() {
        out.extend_from_slice(&(base_count as u32).to_le_bytes());
        out.extend_from_slice(&[0; 4]);
    }
    frames.iter().for_each(|f| f.encode_into(&mut out));
    objects.iter().for_each(|o| o.encode_into(&mut out));
    for delta in deltas {
        for base in &delta.bases {
            out.extend_from_slice(&delta.frame.to_le_bytes());
            out.extend_from_slice(&base.0);
        }
    }
    out
}

/// Decodes a pack index of `version` (1 or 2, from the end magic: [`index_version_of`]),
/// checking every record against the pack's data region.
///
/// # Errors
/// A description of the first inconsistency (more than `MAX_PACK_FRAMES` frames or
/// `MAX_PACK_OBJECTS` objects, wrong length, unknown byte, a frame outside
/// `HEADER_LEN..data_end`, a raw length over [`MAX_FRAME_RAW`], a stored length over
/// `max_stored_len`, an object outside its frame, a version object longer than
/// `crate::object::MAX_VERSION_LEN`; in index 2: a delta frame without bases or with more
/// than [`MAX_DELTA_BASES`], bases on a frame that is not a delta, base records out of frame
/// order, a delta frame over [`MAX_DELTA_RAW`] or holding anything but chunks, a delta in an
/// index 1).
pub fn decode_index(bytes: &[u8], data_end: u64, version: u32) -> Result<PackIndex, String> {
    let header_len = if version >= 2 { 16 } else { 8 };
    if bytes.len() < header_len {
        return Err("index shorter than its header".into());
    }
    let frame_count = u32::from_le_bytes(bytes[0..4].try_into().expect("4 bytes")) as usize;
    let object_count = u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes")) as usize;
    let base_count = if version >= 2 {
        u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes")) as usize
    } else {
        0
    };
    if frame_count > MAX_PACK_FRAMES as usize
        || object_count > MAX_PACK_OBJECTS as usize
        || base_count > MAX_PACK_FRAMES as usize * MAX_DELTA_BASES
    {
        return Err(format!(
            "index claims {frame_count} frames and {object_count} objects, more than a pack may hold"
        ));
    }
    let expected = frame_count
        .checked_mul(FRAME_RECORD_LEN)
        .and_then(|f| {
            object_count
                .checked_mul(OBJECT_RECORD_LEN)
                .and_then(|o| o.checked_add(f))
        })
        .and_then(|n| n.checked_add(base_count.checked_mul(BASE_RECORD_LEN)?))
        .and_then(|n| n.checked_add(header_len));
    if expected != Some(bytes.len()) {
        return Err("index length does not match its record counts".into());
    }
    let bytes = &bytes[header_len - 8..];
    let mut frames = Vec::with_capacity(frame_count);
    for record in bytes[8..8 + frame_count * FRAME_RECORD_LEN].chunks_exact(FRAME_RECORD_LEN) {
        let frame = FrameRecord::decode(record.try_into().expect("record length"))
            .ok_or("unknown compression")?;
        let end = frame.offset.checked_add(u64::from(frame.stored_length));
        if frame.offset < HEADER_LEN
            || end.is_none_or(|end| end > data_end)
            || frame.raw_length > MAX_FRAME_RAW
        {
            return Err(format!(
                "frame at offset {} lies outside the pack's data",
                frame.offset
            ));
        }
        if u64::from(frame.stored_length) > max_stored_len(frame.raw_length, frame.compression) {
            return Err(format!(
                "frame at offset {} claims {} stored bytes for {} raw bytes",
                frame.offset, frame.stored_length, frame.raw_length
            ));
        }
        frames.push(frame);
    }
    let mut objects = Vec::with_capacity(object_count);
    let objects_end = 8 + frame_count * FRAME_RECORD_LEN + object_count * OBJECT_RECORD_LEN;
    for record in
        bytes[8 + frame_count * FRAME_RECORD_LEN..objects_end].chunks_exact(OBJECT_RECORD_LEN)
    {
        let object = ObjectRecord::decode(record.try_into().expect("record length"))
            .ok_or("unknown object kind")?;
        let frame = frames
            .get(object.frame as usize)
            .ok_or("object names a frame that does not exist")?;
        if u64::from(object.offset) + u64::from(object.length) > u64::from(frame.raw_length) {
            return Err(format!(
                "object {} lies outside its frame",
                object.id.short()
            ));
        }
        if object.kind == ObjectKind::Version && object.length > crate::object::MAX_VERSION_LEN {
            return Err(format!(
                "version {} is {} bytes, longer than a version may be",
                object.id.short(),
                object.length
            ));
        }
        objects.push(object);
    }
    let deltas = decode_bases(&bytes[objects_end..], &frames, &objects)?;
    Ok(PackIndex {
        frames,
        objects,
        deltas,
    })
}

/// Decodes the base records of an index 2 and checks them against the frames and objects:
/// every delta frame has 1 to [`MAX_DELTA_BASES`] bases, no other frame has any, records come
/// in frame order, a delta frame holds chunks only and at most [`MAX_DELTA_RAW`] raw bytes.
fn decode_bases(
    records: &[u8],
    frames: &[FrameRecord],
    objects: &[ObjectRecord],
) -> Result<Vec<FrameBases>, String> {
    let mut deltas: Vec<FrameBases> = Vec::new();
    for record in records.chunks_exact(BASE_RECORD_LEN) {
        let frame = u32::from_le_bytes(record[0..4].try_into().expect("4 bytes"));
        let base = ObjectId::from_slice(&record[4..36]).ok_or("bad base id")?;
        let Some(record) = frames.get(frame as usize) else {
            return Err("a base record names a frame that does not exist".into());
        };
        if record.compression != Compression::Delta {
            return Err(format!(
                "frame at offset {} lists bases but is not a delta frame",
                record.offset
            ));
        }
        match deltas.last_mut() {
            Some(last) if last.frame == frame => {
                if last.bases.len() == MAX_DELTA_BASES {
                    return Err(format!(
                        "delta frame at offset {} lists more than {MAX_DELTA_BASES} bases",
                        record.offset
                    ));
                }
                last.bases.push(base);
            }
            Some(last) if last.frame > frame => {
                return Err("base records are out of frame order".into());
            }
            _ => deltas.push(FrameBases {
                frame,
                bases: vec![base],
            }),
        }
    }
    let mut listed = deltas.iter().map(|d| d.frame).peekable();
    for (index, frame) in frames.iter().enumerate() {
        let has_bases = listed.next_if_eq(&(index as u32)).is_some();
        if (frame.compression == Compression::Delta) != has_bases {
            return Err(format!(
                "delta frame at offset {} lists no base",
                frame.offset
            ));
        }
        if has_bases && frame.raw_length > MAX_DELTA_RAW {
            return Err(format!(
                "delta frame at offset {} claims {} raw bytes, more than a delta frame may hold",
                frame.offset, frame.raw_length
            ));
        }
    }
    for object in objects {
        if frames[object.frame as usize].compression == Compression::Delta
            && object.kind != ObjectKind::Chunk
        {
            return Err(format!(
                "{} {} lies in a delta frame, which holds chunks only",
                object.kind.name(),
                object.id.short()
            ));
        }
    }
    Ok(deltas)
}

/// The path of pack `id` in `packs_dir`.
pub fn pack_path(packs_dir: &Path, id: &ObjectId) -> PathBuf {
    packs_dir.join(format!("{id}.pack"))
}

/// The pack id a file name of the form [`pack_path`] gives (`<64 hex digits>.pack`), or
/// `None` for any other name.
pub fn pack_id_of(file_name: &str) -> Option<ObjectId> {
    file_name.strip_suffix(".pack")?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(
        offset: u64,
        stored_length: u32,
        raw_length: u32,
        compression: Compression,
    ) -> FrameRecord {
        FrameRecord {
            offset,
            stored_length,
            raw_length,
            compression,
        }
    }

    fn object(kind: ObjectKind, frame: u32, offset: u32, length: u32) -> ObjectRecord {
        ObjectRecord {
            id: ObjectId::of(&[kind as u8, frame as u8, offset as u8]),
            kind,
            frame,
            offset,
            length,
        }
    }

    /// The index of one stored-as-is frame of `raw` bytes at the header's end, with `objects`.
    fn one_frame_index(raw: u32, objects: &[ObjectRecord]) -> (Vec<u8>, u64) {
        let frames = [frame(HEADER_LEN, raw, raw, Compression::None)];
        (
            encode_index(&frames, objects, &[]),
            HEADER_LEN + u64::from(raw),
        )
    }

    #[test]
    fn a_frame_record_round_trips_through_its_24_byte_encoding() {
        for record in [
            frame(HEADER_LEN, 7, 9, Compression::Zstd),
            frame(u64::MAX, u32::MAX, u32::MAX, Compression::None),
        ] {
            let mut bytes = Vec::new();
            record.encode_into(&mut bytes);
            assert_eq!(bytes.len(), FRAME_RECORD_LEN);
            assert_eq!(&bytes[17..], &[0; 7], "reserved bytes are zero");
            assert_eq!(
                FrameRecord::decode(bytes.as_slice().try_into().unwrap()),
                Some(record)
            );
        }
    }

    #[test]
    fn an_object_record_round_trips_through_its_48_byte_encoding() {
        for kind in (1..=6).map(|k| ObjectKind::from_u8(k).unwrap()) {
            let record = ObjectRecord {
                id: ObjectId::of(kind.name().as_bytes()),
                kind,
                frame: 0x0102_0304,
                offset: u32::MAX,
                length: 0x0a0b_0c0d,
            };
            let mut bytes = Vec::new();
            record.encode_into(&mut bytes);
            assert_eq!(bytes.len(), OBJECT_RECORD_LEN);
            assert_eq!(&bytes[..32], &record.id.0);
            assert_eq!(&bytes[33..36], &[0; 3], "reserved bytes are zero");
            assert_eq!(
                ObjectRecord::decode(bytes.as_slice().try_into().unwrap()),
                Some(record)
            );
        }
    }

    #[test]
    fn an_unknown_compression_or_kind_byte_decodes_to_none() {
        let mut bytes = Vec::new();
        frame(HEADER_LEN, 1, 1, Compression::None).encode_into(&mut bytes);
        bytes[16] = 3;
        assert_eq!(
            FrameRecord::decode(bytes.as_slice().try_into().unwrap()),
            None
        );
        let mut bytes = Vec::new();
        object(ObjectKind::Chunk, 0, 0, 1).encode_into(&mut bytes);
        for unknown in [0, 7, 255] {
            bytes[32] = unknown;
            assert_eq!(
                ObjectRecord::decode(bytes.as_slice().try_into().unwrap()),
                None
            );
        }
    }

    #[test]
    fn an_index_round_trips_through_encode_and_decode() {
        let frames = vec![
            frame(HEADER_LEN, 100, 300, Compression::Zstd),
            frame(HEADER_LEN + 100, 50, 50, Compression::None),
        ];
        let objects = vec![
            object(ObjectKind::Chunk, 0, 0, 200),
            object(ObjectKind::Tree, 0, 200, 100),
            object(ObjectKind::FileMap, 1, 0, 50),
        ];
        let bytes = encode_index(&frames, &objects, &[]);
        assert_eq!(
            bytes.len(),
            8 + 2 * FRAME_RECORD_LEN + 3 * OBJECT_RECORD_LEN
        );
        assert_eq!(&bytes[..8], &[2, 0, 0, 0, 3, 0, 0, 0]);
        assert_eq!(
            decode_index(&bytes, HEADER_LEN + 150, 1),
            Ok(PackIndex {
                frames,
                objects,
                deltas: vec![]
            })
        );
        assert_eq!(
            decode_index(&encode_index(&[], &[], &[]), HEADER_LEN, 1),
            Ok(PackIndex::default())
        );
    }

    #[test]
    fn an_index_claiming_more_records_than_a_pack_may_hold_is_refused_before_allocating() {
        // Only the 8 count bytes are there: a decoder that trusted the counts would reserve
        // gigabytes, or fail on the length check instead of the limit.
        for (frames, objects) in [
            (MAX_PACK_FRAMES + 1, 0),
            (0, MAX_PACK_OBJECTS + 1),
            (u32::MAX, u32::MAX),
        ] {
            let mut bytes = frames.to_le_bytes().to_vec();
            bytes.extend_from_slice(&objects.to_le_bytes());
            let error = decode_index(&bytes, u64::MAX, 1).unwrap_err();
            assert!(error.contains("more than a pack may hold"), "{error}");
        }
        // At the limit, the counts pass and only the length is wrong.
        let mut bytes = MAX_PACK_FRAMES.to_le_bytes().to_vec();
        bytes.extend_from_slice(&MAX_PACK_OBJECTS.to_le_bytes());
        let error = decode_index(&bytes, u64::MAX, 1).unwrap_err();
        assert!(
            error.contains("does not match its record counts"),
            "{error}"
        );
    }

    #[test]
    fn an_index_whose_length_disagrees_with_its_counts_is_refused() {
        let (bytes, data_end) = one_frame_index(10, &[object(ObjectKind::Chunk, 0, 0, 10)]);
        assert!(decode_index(&bytes, data_end, 1).is_ok());
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode_index(&longer, data_end, 1).is_err());
        assert!(decode_index(&bytes[..bytes.len() - 1], data_end, 1).is_err());
        for short in 0..8 {
            assert!(decode_index(&bytes[..short], data_end, 1).is_err());
        }
    }

    #[test]
    fn a_frame_outside_the_data_region_is_refused() {
        let data_end = HEADER_LEN + 100;
        let decode = |f: FrameRecord| decode_index(&encode_index(&[f], &[], &[]), data_end, 1);
        // Ending exactly at the data's end is inside.
        assert!(decode(frame(HEADER_LEN, 100, 100, Compression::None)).is_ok());
        assert!(decode(frame(HEADER_LEN + 99, 1, 1, Compression::None)).is_ok());
        for outside in [
            frame(HEADER_LEN - 1, 1, 1, Compression::None),
            frame(0, 1, 1, Compression::None),
            frame(HEADER_LEN, 101, 101, Compression::None),
            frame(HEADER_LEN + 100, 1, 1, Compression::None),
            frame(u64::MAX, 1, 1, Compression::None),
            frame(u64::MAX - 1, 10, 10, Compression::None),
        ] {
            let error = decode(outside).unwrap_err();
            assert!(
                error.contains("outside the pack's data"),
                "{outside:?}: {error}"
            );
        }
    }

    #[test]
    fn a_frame_claiming_more_than_max_frame_raw_bytes_is_refused() {
        let decode = |raw: u32| {
            decode_index(
                &encode_index(&[frame(HEADER_LEN, 10, raw, Compression::Zstd)], &[], &[]),
                HEADER_LEN + 10,
                1,
            )
        };
        assert!(decode(MAX_FRAME_RAW).is_ok());
        assert!(decode(MAX_FRAME_RAW + 1).is_err());
        assert!(decode(u32::MAX).is_err());
    }

    #[test]
    fn max_stored_len_is_the_raw_length_as_is_and_zstds_bound_compressed() {
        assert_eq!(max_stored_len(1000, Compression::None), 1000);
        assert_eq!(max_stored_len(0, Compression::None), 0);
        let bound = max_stored_len(1000, Compression::Zstd);
        assert!(bound > 1000, "{bound}");
        assert_eq!(bound, zstd::zstd_safe::compress_bound(1000) as u64);
    }

    #[test]
    fn a_frame_storing_more_bytes_than_its_raw_length_allows_is_refused() {
        let decode = |stored: u32, raw: u32, compression| {
            decode_index(
                &encode_index(&[frame(HEADER_LEN, stored, raw, compression)], &[], &[]),
                HEADER_LEN + 1_000_000,
                1,
            )
        };
        assert!(decode(100, 100, Compression::None).is_ok());
        let error = decode(101, 100, Compression::None).unwrap_err();
        assert!(error.contains("stored bytes"), "{error}");
        let bound = max_stored_len(100, Compression::Zstd) as u32;
        assert!(bound > 101);
        assert!(decode(bound, 100, Compression::Zstd).is_ok());
        assert!(decode(bound + 1, 100, Compression::Zstd).is_err());
    }

    #[test]
    fn an_object_outside_its_frame_or_naming_no_frame_is_refused() {
        let decode = |o: ObjectRecord| {
            let (bytes, end) = one_frame_index(100, &[o]);
            decode_index(&bytes, end, 1)
        };
        assert!(decode(object(ObjectKind::Chunk, 0, 0, 100)).is_ok());
        assert!(decode(object(ObjectKind::Chunk, 0, 100, 0)).is_ok());
        assert!(decode(object(ObjectKind::Chunk, 0, 60, 40)).is_ok());
        for outside in [
            object(ObjectKind::Chunk, 0, 0, 101),
            object(ObjectKind::Chunk, 0, 61, 40),
            object(ObjectKind::Chunk, 0, 101, 0),
            // Would wrap in u32 arithmetic.
            object(ObjectKind::Chunk, 0, u32::MAX, 2),
            object(ObjectKind::Chunk, 0, 1, u32::MAX),
        ] {
            let error = decode(outside).unwrap_err();
            assert!(error.contains("outside its frame"), "{outside:?}: {error}");
        }
        let error = decode(object(ObjectKind::Chunk, 1, 0, 1)).unwrap_err();
        assert!(error.contains("does not exist"), "{error}");
    }

    #[test]
    fn a_version_longer_than_max_version_len_is_refused_and_other_kinds_are_not() {
        let max = crate::object::MAX_VERSION_LEN;
        let decode = |kind, length| {
            let (bytes, end) = one_frame_index(max + 1, &[object(kind, 0, 0, length)]);
            decode_index(&bytes, end, 1)
        };
        assert!(decode(ObjectKind::Version, max).is_ok());
        let error = decode(ObjectKind::Version, max + 1).unwrap_err();
        assert!(error.contains("longer than a version may be"), "{error}");
        assert!(decode(ObjectKind::Chunk, max + 1).is_ok());
        assert!(decode(ObjectKind::Tree, max + 1).is_ok());
    }

    #[test]
    fn an_unknown_byte_in_a_record_is_refused() {
        let (mut bytes, end) = one_frame_index(10, &[object(ObjectKind::Chunk, 0, 0, 10)]);
        let kind_at = 8 + FRAME_RECORD_LEN + 32;
        bytes[kind_at] = 0;
        assert!(decode_index(&bytes, end, 1).is_err());
        bytes[kind_at] = ObjectKind::Chunk as u8;
        bytes[8 + 16] = 9;
        assert!(decode_index(&bytes, end, 1).is_err());
    }

    #[test]
    fn max_index_len_is_the_index_of_a_full_pack() {
        assert_eq!(
            MAX_INDEX_LEN,
            8 + u64::from(MAX_PACK_FRAMES) * 24 + u64::from(MAX_PACK_OBJECTS) * 48
        );
        assert_eq!(TRAILER_LEN, 8 + 8 + 32 + 8);
        assert_eq!(HEADER_LEN as usize, MAGIC.len() + 4 + 4);
    }
}
