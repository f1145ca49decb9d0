//! Archive member paths (`archive::member_path`) and link targets
//! (`walk::check_symlink_target`) from `dsv import` of tar and zip archives.
//!
//! Input: UTF-8 member name, optionally followed by a NUL and a symlink target (a name with
//! a NUL is refused anyway, so NUL never splits a name dsv would accept).
#![no_main]
use dsv::archive::member_path;
use dsv::object::check_name;
use dsv::walk::check_symlink_target;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (name, target) = match text.split_once('\0') {
        Some((name, target)) => (name, Some(target)),
        None => (text, None),
    };
    let Ok(Some(path)) = member_path(name) else {
        return;
    };
    // An accepted path is relative, normalized, and every component is storable.
    assert!(!path.starts_with('/'), "{name:?} -> absolute {path:?}");
    for part in path.split('/') {
        assert!(part != "." && part != "..", "{name:?} -> {path:?}");
        assert!(check_name(part).is_ok(), "{name:?} -> {path:?}");
    }
    // Normalizing again changes nothing (it may refuse: a normalized `./C:/x` is `C:/x`,
    // which member_path refuses as a drive letter; harmless on Unix).
    if let Ok(again) = member_path(&path) {
        assert_eq!(again.as_deref(), Some(path.as_str()));
    }
    let Some(target) = target else {
        return;
    };
    if check_symlink_target(&path, target).is_ok() {
        // An accepted link resolves, lexically, inside the dataset's root.
        assert!(!target.starts_with('/'));
        let mut depth = path.split('/').count() - 1;
        for part in target.split('/') {
            match part {
                "" | "." => {}
                ".." => {
                    depth = depth
                        .checked_sub(1)
                        .unwrap_or_else(|| panic!("link {path:?} -> {target:?} leaves the root"));
                }
                _ => depth += 1,
            }
        }
    }
});
