//! Pack tails (index + trailer, `packs/<id>.idx` on a remote, and the end of every pack).
//!
//! Input: 8 bytes little-endian `index offset`, then the index bytes. The target runs
//! `decode_index` on them directly, as an index 1 and as an index 2 (its base records:
//! `fuzz_delta` decodes the delta frames they describe too), then again through `parse_tail` with a trailer built to
//! match (a random trailer almost never carries the index's BLAKE3, so without this the
//! fuzzer would never get past the hash check), and `parse_tail` on the raw input as well.
#![no_main]
use dsv::pack::format::{self, decode_index, encode_index};
use dsv::pack::reader::parse_tail;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The whole input as a tail, against the pack size its own trailer implies.
    if data.len() >= format::TRAILER_LEN as usize {
        let trailer = &data[data.len() - format::TRAILER_LEN as usize..];
        let offset = u64::from_le_bytes(trailer[0..8].try_into().unwrap());
        let _ = parse_tail(data, offset.wrapping_add(data.len() as u64));
        let _ = parse_tail(data, offset);
    }
    if data.len() < 8 {
        return;
    }
    let (head, index) = data.split_at(8);
    let index_offset = u64::from_le_bytes(head.try_into().unwrap());
    // The same bytes as an index 1 and as an index 2 (the end magic says which).
    for version in [1, 2] {
        let direct = decode_index(index, index_offset, version);
        if let Ok(decoded) = &direct {
            // An index 1 lists no bases; an index 2 that lists none is refused by no rule
            // here, but re-encodes as an index 1 (a writer seals such a pack as one).
            assert!(version == 2 || decoded.deltas.is_empty());
            // Records have reserved bytes the decoder ignores, so compare values, not bytes.
            let bytes = encode_index(&decoded.frames, &decoded.objects, &decoded.deltas);
            let again_version = decoded.version();
            if again_version == version {
                assert_eq!(bytes.len(), index.len());
            }
            let again = decode_index(&bytes, index_offset, again_version)
                .expect("re-encoded index decodes");
            assert_eq!(&again, decoded);
        }
        // The same index behind a well-formed trailer, as a writer would seal it.
        let mut tail = index.to_vec();
        tail.extend_from_slice(&index_offset.to_le_bytes());
        tail.extend_from_slice(&(index.len() as u64).to_le_bytes());
        tail.extend_from_slice(blake3::hash(index).as_bytes());
        tail.extend_from_slice(format::end_magic(version));
        if let Some(pack_size) = index_offset.checked_add(tail.len() as u64) {
            let parsed = parse_tail(&tail, pack_size);
            if index_offset >= format::HEADER_LEN {
                assert_eq!(parsed, direct, "parse_tail disagrees with decode_index");
            } else {
                assert!(parsed.is_err(), "an index inside the header was accepted");
            }
        }
    }
});
