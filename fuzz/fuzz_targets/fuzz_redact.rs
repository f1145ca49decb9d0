//! URL redaction (`redact::url`, `redact::text`), which every error message, `--json` error
//! and recorded URL passes through: any text, never a panic; redacting twice changes
//! nothing more.
#![no_main]
use dsv::redact;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let once = redact::url(text);
    assert_eq!(redact::url(&once), once, "url redaction is idempotent");
    let in_text = redact::text(text);
    assert_eq!(
        redact::text(&in_text),
        in_text,
        "text redaction is idempotent"
    );
    let _ = redact::credentials_in(text);
});
