//! Pack frames: a frame record (the 24-byte header the index keeps for each frame) plus the
//! stored bytes it describes, decompressed under the claimed raw length, both as a local
//! read does (`PackReader`: `decompress_frame` into a buffer reserved to `raw_length`) and as
//! a pull does (`EncodedFrame::verified`, which also checks the objects in the frame).
//!
//! Input: 24-byte `FrameRecord`, 1 byte object count n (taken mod 8), n × 48-byte
//! `ObjectRecord`s, then the stored bytes.
#![no_main]
use std::cell::RefCell;

use dsv::pack::format::{FRAME_RECORD_LEN, MAX_FRAME_RAW, OBJECT_RECORD_LEN};
use dsv::pack::reader::decompress_frame;
use dsv::pack::{Compression, EncodedFrame, FrameRecord, ObjectRecord};
use libfuzzer_sys::fuzz_target;

thread_local! {
    // Reused like PackReader's: a zstd context is costly to set up.
    static DECOMPRESSOR: RefCell<zstd::bulk::Decompressor<'static>> =
        RefCell::new(zstd::bulk::Decompressor::new().expect("zstd context"));
}

fuzz_target!(|data: &[u8]| {
    if data.len() < FRAME_RECORD_LEN + 1 {
        return;
    }
    let (head, rest) = data.split_at(FRAME_RECORD_LEN);
    let Some(record) = FrameRecord::decode(head.try_into().unwrap()) else {
        return;
    };
    let mut encoded = Vec::new();
    record.encode_into(&mut encoded);
    // Bytes 17..24 are reserved and ignored by the decoder: the first 17 round-trip.
    assert_eq!(encoded[..17], head[..17]);
    assert_eq!(
        FrameRecord::decode(encoded[..].try_into().unwrap()),
        Some(record)
    );

    let count = usize::from(rest[0] % 8);
    let mut rest = &rest[1..];
    let mut objects = Vec::new();
    for _ in 0..count {
        if rest.len() < OBJECT_RECORD_LEN {
            return;
        }
        let (bytes, tail) = rest.split_at(OBJECT_RECORD_LEN);
        rest = tail;
        if let Some(o) = ObjectRecord::decode(bytes.try_into().unwrap()) {
            let mut again = Vec::new();
            o.encode_into(&mut again);
            assert_eq!(ObjectRecord::decode(again[..].try_into().unwrap()), Some(o));
            objects.push((o.id, o.kind, o.offset, o.length));
        }
    }
    let stored = rest;

    // The local read path (PackReader::load), which refuses oversized claims first.
    let raw_length = record.raw_length as usize;
    let local_ok = if record.raw_length > MAX_FRAME_RAW {
        false
    } else {
        match record.compression {
            Compression::None => stored.len() == raw_length,
            // Read only against its bases (fuzz_delta_frame): never without them.
            Compression::Delta => false,
            Compression::Zstd => {
                let mut buffer = Vec::new();
                let result = DECOMPRESSOR.with(|d| {
                    decompress_frame(&mut d.borrow_mut(), stored, record.raw_length, &mut buffer)
                });
                // The bound: never more than what was reserved for the claimed length.
                assert!(
                    buffer.len() <= raw_length.max(8),
                    "decompressed {} bytes for a claim of {raw_length}",
                    buffer.len()
                );
                result.is_ok() && buffer.len() == raw_length
            }
        }
    };

    // The pull path must agree on whether the frame's bytes are sound.
    let verified = EncodedFrame::verified(
        stored.to_vec(),
        record.raw_length,
        record.compression,
        objects.clone(),
    );
    if verified.is_ok() {
        assert!(
            local_ok,
            "a pulled frame is accepted that a local read refuses"
        );
        assert_eq!(verified.unwrap().stored_len(), stored.len());
    } else if objects.is_empty() {
        assert!(!local_ok, "a local read accepts a frame a pull refuses");
    }
});
