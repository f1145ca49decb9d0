//! Revision syntax (`NAME`, `NAME@TAG`, `NAME@<hex>`, `NAME@BASE~N`).
#![no_main]
use dsv::Revision;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(revision) = Revision::parse(text) {
        // Not canonical (`NAME` = `NAME@latest`, `~0`, leading zeros or '+' in N): the shown
        // form, used in messages and to resolve, must parse back to the same revision.
        let shown = revision.to_string();
        let again = Revision::parse(&shown).unwrap_or_else(|e| {
            panic!("{text:?} parses, but its shown form {shown:?} does not: {e}")
        });
        assert_eq!(again, revision, "{text:?} -> {shown:?}");
    }
});
