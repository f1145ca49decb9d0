//! The pack file's byte layout. All integers are little-endian.
//!
//! ```text
//! offset  size  field
//! 0       8     magic "DSVPACK1"
//! 8       4     format version (1)
//! 12      4     reserved, zero
//! 16      …     frames, back to back
//! I       …     index: frame_count u32, object_count u32,
//!               frame_count × FrameRecord (24 bytes), object_count × ObjectRecord (48 bytes)
//! end-56  8     index offset I
//! end-48  8     index length in bytes
//! end-40  32    BLAKE3 of the index bytes
//! end-8   8     magic "DSVPEND1"
//! ```

use crate::id::ObjectId;
use crate::object::ObjectKind;

/// The first 8 bytes of every pack.
pub const MAGIC: &[u8; 8] = b"DSVPACK1";
/// The last 8 bytes of every pack.
pub const END_MAGIC: &[u8; 8] = b"DSVPEND1";
/// The format version written in the header.
pub const FORMAT_VERSION: u32 = 1;
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
pub const MAX_PACK_FRAMES: u32 = 1 << 20;
/// The most objects one pack may list (2^22 = 4,194,304). Writers seal a pack before it
/// would list more; readers refuse an index that claims more.
pub const MAX_PACK_OBJECTS: u32 = 1 << 22;
/// The longest index a reader accepts, in bytes: [`MAX_PACK_FRAMES`] frame records and
/// [`MAX_PACK_OBJECTS`] object records after the 8-byte counts (about 216 MiB).
pub const MAX_INDEX_LEN: u64 = 8
    + MAX_PACK_FRAMES as u64 * FRAME_RECORD_LEN as u64
    + MAX_PACK_OBJECTS as u64 * OBJECT_RECORD_LEN as u64;

/// The most stored bytes a frame of `raw_length` raw bytes may take: exactly `raw_length`
/// when stored as is, and zstd's worst-case bound (`ZSTD_compressBound`, a little over
/// `raw_length`) when compressed. A reader refuses a frame record claiming more, before it
/// allocates or downloads anything for it.
pub fn max_stored_len(raw_length: u32, compression: Compression) -> u64 {
    match compression {
        Compression::None => u64::from(raw_length),
        Compression::Zstd => zstd::zstd_safe::compress_bound(raw_length as usize) as u64,
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
}

impl Compression {
    /// Parses the index byte.
    pub fn from_u8(value: u8) -> Option<Self> {
        match value {
            0 => Some(Compression::None),
            1 => Some(Compression::Zstd),
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

/// Encodes a pack index.
pub fn encode_index(frames: &[FrameRecord], objects: &[ObjectRecord]) -> Vec<u8> {
    let mut out =
        Vec::with_capacity(8 + frames.len() * FRAME_RECORD_LEN + objects.len() * OBJECT_RECORD_LEN);
    out.extend_from_slice(&(frames.len() as u32).to_le_bytes());
    out.extend_from_slice(&(objects.len() as u32).to_le_bytes());
    frames.iter().for_each(|f| f.encode_into(&mut out));
    objects.iter().for_each(|o| o.encode_into(&mut out));
    out
}

/// Decodes a pack index, checking every record against the pack's data region.
///
/// # Errors
/// A description of the first inconsistency (more than [`MAX_PACK_FRAMES`] frames or
/// [`MAX_PACK_OBJECTS`] objects, wrong length, unknown byte, a frame outside
/// `HEADER_LEN..data_end`, a raw length over [`MAX_FRAME_RAW`], a stored length over
/// [`max_stored_len`], an object outside its frame, a version object longer than
/// [`crate::object::MAX_VERSION_LEN`]).
pub fn decode_index(
    bytes: &[u8],
    data_end: u64,
) -> Result<(Vec<FrameRecord>, Vec<ObjectRecord>), String> {
    if bytes.len() < 8 {
        return Err("index shorter than its header".into());
    }
    let frame_count = u32::from_le_bytes(bytes[0..4].try_into().expect("4 bytes")) as usize;
    let object_count = u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes")) as usize;
    if frame_count > MAX_PACK_FRAMES as usize || object_count > MAX_PACK_OBJECTS as usize {
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
        .and_then(|n| n.checked_add(8));
    if expected != Some(bytes.len()) {
        return Err("index length does not match its record counts".into());
    }
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
    for record in bytes[8 + frame_count * FRAME_RECORD_LEN..].chunks_exact(OBJECT_RECORD_LEN) {
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
    Ok((frames, objects))
}
