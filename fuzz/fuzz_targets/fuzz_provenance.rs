//! Provenance objects (JSON), as read from packs and remotes.
#![no_main]
use dsv::object::Provenance;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(provenance) = Provenance::decode(data) else {
        return;
    };
    // JSON is not canonical (whitespace, escapes, number forms), so no byte-for-byte check:
    // the encoding of a decoded provenance must decode to the same value and be a fixed point.
    let bytes = provenance.encode();
    let again = Provenance::decode(&bytes).expect("an encoded provenance decodes");
    assert_eq!(again, provenance, "decode(encode(p)) != p");
    assert_eq!(again.encode(), bytes, "encode is not a fixed point");
});
