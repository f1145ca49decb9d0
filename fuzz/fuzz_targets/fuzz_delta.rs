//! Delta frames and the version 2 index that lists their bases (issue 39).
//!
//! Input: 2 bytes little-endian `D`, then `D` bytes of pack data (the frames, as if at pack
//! offset 16, right after the header), then an index of version 2 (its four counts, frame,
//! object and base records). The target:
//!
//! 1. decodes the index as version 2 (`decode_index`) against the data region, and as version
//!    1 too (whatever it says, it must not panic); an index that decodes re-encodes
//!    (`encode_index`) to one that decodes to the same values, and its rules hold: a frame has
//!    bases iff it is a delta frame, 1 to `MAX_DELTA_BASES` of them, a delta frame holds chunks
//!    only and at most `MAX_DELTA_RAW` raw bytes;
//! 2. decodes each delta frame it lists (the first 8) against a prefix made of its bases' raw
//!    bytes (a base's bytes are those of the object of that id in a stored-as-is frame of the
//!    same data when there is one, else its 32 id bytes), both as a local read does
//!    (`decompress_delta_frame` under the claimed raw length, then every chunk hashed) and as a
//!    pull does (`EncodedFrame::verified_delta`): the two must agree, and the output never
//!    exceeds the claimed length. A frame asking for a window over the cap must be refused
//!    before zstd allocates it (the run's memory limit catches one that is not).
#![no_main]
use dsv::ObjectId;
use dsv::object::ObjectKind;
use dsv::pack::format::{HEADER_LEN, MAX_DELTA_BASES, MAX_DELTA_RAW, decode_index, encode_index};
use dsv::pack::writer::decompress_delta_frame;
use dsv::pack::{Compression, EncodedFrame, PackIndex};
use libfuzzer_sys::fuzz_target;

/// The raw bytes a base id stands for in this input (see the module documentation).
fn base_bytes<'a>(index: &PackIndex, data: &'a [u8], id: &'a ObjectId) -> &'a [u8] {
    for object in &index.objects {
        if object.id != *id {
            continue;
        }
        let frame = &index.frames[object.frame as usize];
        // A stored-as-is frame whose stored bytes are its raw bytes (a reader refuses others).
        if frame.compression != Compression::None || frame.stored_length != frame.raw_length {
            continue;
        }
        let start = (frame.offset - HEADER_LEN) as usize + object.offset as usize;
        if let Some(bytes) = data.get(start..start + object.length as usize) {
            return bytes;
        }
    }
    &id.0
}

fuzz_target!(|input: &[u8]| {
    if input.len() < 2 {
        return;
    }
    let data_len = usize::from(u16::from_le_bytes([input[0], input[1]]));
    let rest = &input[2..];
    let (data, index_bytes) = rest.split_at(data_len.min(rest.len()));
    let data_end = HEADER_LEN + data.len() as u64;
    let _ = decode_index(index_bytes, data_end, 1);
    let Ok(index) = decode_index(index_bytes, data_end, 2) else {
        return;
    };

    // The index's own rules.
    let bytes = encode_index(&index.frames, &index.objects, &index.deltas);
    let version = if index.deltas.is_empty() { 1 } else { 2 };
    assert_eq!(
        decode_index(&bytes, data_end, version).as_ref(),
        Ok(&index),
        "a decoded index does not survive its re-encoding"
    );
    assert!(index.deltas.windows(2).all(|w| w[0].frame < w[1].frame));
    for (number, frame) in index.frames.iter().enumerate() {
        let bases = index.bases_of(number as u32);
        if frame.compression == Compression::Delta {
            assert!((1..=MAX_DELTA_BASES).contains(&bases.len()));
            assert!(frame.raw_length <= MAX_DELTA_RAW);
        } else {
            assert!(bases.is_empty(), "bases on a frame that is not a delta");
        }
    }

    // Each delta frame, decoded as a local read and as a pull decode it.
    for delta in index.deltas.iter().take(8) {
        let frame = index.frames[delta.frame as usize];
        let start = (frame.offset - HEADER_LEN) as usize;
        let stored = &data[start..start + frame.stored_length as usize];
        let prefix: Vec<u8> = delta
            .bases
            .iter()
            .flat_map(|id| base_bytes(&index, data, id).iter().copied())
            .collect();
        let objects: Vec<_> = index
            .objects
            .iter()
            .filter(|o| o.frame == delta.frame)
            .map(|o| {
                assert_eq!(o.kind, ObjectKind::Chunk, "a delta frame holding a {o:?}");
                (o.id, o.kind, o.offset, o.length)
            })
            .collect();

        let mut buffer = Vec::new();
        let decoded = decompress_delta_frame(stored, &prefix, frame.raw_length, &mut buffer);
        assert!(
            buffer.len() <= (frame.raw_length as usize).max(8),
            "decompressed {} bytes for a claim of {}",
            buffer.len(),
            frame.raw_length
        );
        let local_ok = decoded.is_ok()
            && buffer.len() == frame.raw_length as usize
            && objects.iter().all(|&(id, kind, offset, length)| {
                let bytes = &buffer[offset as usize..(offset + length) as usize];
                kind.check(&id, bytes).is_ok()
            });

        let pulled = EncodedFrame::verified_delta(
            stored.to_vec(),
            frame.raw_length,
            objects,
            delta.bases.clone(),
            &prefix,
        );
        match pulled {
            Ok((encoded, raw)) => {
                assert!(
                    local_ok,
                    "a pull accepts a delta frame a local read refuses"
                );
                assert_eq!(raw, buffer, "a pull and a local read decode differently");
                assert_eq!(encoded.stored_len(), stored.len());
                assert_eq!(encoded.bases(), delta.bases.as_slice());
            }
            Err(_) => assert!(
                !local_ok,
                "a local read accepts a delta frame a pull refuses"
            ),
        }
    }
});
