//! Lock files (`dsv lock` JSON, format 1), as `checkout --lock` and `audit --lock` read them.
#![no_main]
use std::path::Path;

use dsv::ops::lock_file::parse_lock;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // read_lock reads the file as UTF-8 text first.
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = Path::new("fuzz.lock");
    if let Ok(lock) = parse_lock(text, path) {
        // JSON is not canonical: check the value round trip through the form `dsv lock`
        // writes (pretty JSON, cli::ui::Ui::json).
        let written = serde_json::to_string_pretty(&lock).expect("a lock file serializes");
        assert_eq!(
            parse_lock(&written, path).expect("a written lock parses"),
            lock
        );
    }
});
