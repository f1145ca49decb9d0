//! File-map objects (`DSVFMAP1`), as read from packs and remotes.
#![no_main]
use dsv::object::FileMap;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(map) = FileMap::decode(data) {
        // Canonical: fixed-size records whose count must match the length exactly.
        let bytes = map.encode();
        assert_eq!(bytes, data, "a decoded file map re-encodes differently");
        assert_eq!(
            FileMap::decode(&bytes).expect("re-encoded map decodes"),
            map
        );
        let _ = map.size();
    }
});
