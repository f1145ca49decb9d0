//! Version objects (`dsv-version 1` text), as read from packs and remotes.
#![no_main]
use dsv::object::Version;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(version) = Version::decode(data) else {
        return;
    };
    // Not canonical, so no byte-for-byte check: the decoder also accepts `time +5` or
    // `files 007` (Rust's integer parsing), uppercase hex ids, and '\r' in author and source,
    // which the encoder turns into spaces. What must hold: the encoding of a decoded version
    // decodes, and is a fixed point of decode-then-encode.
    let bytes = version.encode();
    let again = Version::decode(&bytes).expect("an encoded version decodes");
    assert_eq!(again.encode(), bytes, "encode is not a fixed point");
    if !version.author.contains('\r') && !version.source.contains('\r') {
        assert_eq!(again, version, "decode(encode(v)) != v");
    }
});
