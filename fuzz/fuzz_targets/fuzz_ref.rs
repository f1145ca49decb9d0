//! Remote refs: a ref's bytes (`"<version id>\n"`) and a listed ref key
//! (`refs/heads/<dataset>`, `refs/tags/<dataset>/<tag>`).
#![no_main]
use dsv::remote::{decode_ref, parse_ref_key};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(id) = decode_ref(data) {
        // Not canonical (surrounding whitespace, uppercase hex): check the value round trip
        // through the form Remote::update_ref writes.
        assert_eq!(decode_ref(format!("{id}\n").as_bytes()), Some(id));
    }
    if let Ok(key) = std::str::from_utf8(data)
        && let Some(name) = parse_ref_key(key)
    {
        // Keys are canonical: the key of a parsed name is the key it was parsed from.
        let again = name.key();
        assert_eq!(
            again.as_ref(),
            key,
            "a parsed ref key re-encodes differently"
        );
        assert_eq!(parse_ref_key(again.as_ref()), Some(name));
    }
});
