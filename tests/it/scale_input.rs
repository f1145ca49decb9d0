//! Input at the limits of scale (issue 13, "Bad input"): very many entries in one folder,
//! deep nesting, names and paths at the operating system's limits, and a disk that fills
//! while the catalog grows. What dsv takes round-trips exactly; what it cannot take gets a
//! clear error and leaves nothing recorded or behind.

use std::fs;
use std::path::{Path, PathBuf};

use crate::common::TestEnv;

/// The entries of a directory, by name (to show that nothing was left behind).
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// `prefix` (global options) followed by `args`.
fn with<'a>(prefix: &[&'a str], args: &[&'a str]) -> Vec<&'a str> {
    [prefix, args].concat()
}

/// Asserts the store records no dataset, no workspace, no pack and no temp file.
fn assert_nothing_recorded(env: &TestEnv, store: &[&str]) {
    assert_eq!(env.json(&with(store, &["ls"])), serde_json::json!([]));
    assert_eq!(
        env.json(&with(store, &["workspace", "ls"])),
        serde_json::json!([])
    );
    let dsv_dir = match store {
        [_, path] => PathBuf::from(path).join(".dsv"),
        _ => env.path(".dsv"),
    };
    assert!(names(&dsv_dir.join("packs")).is_empty(), "no pack is left");
    assert!(
        names(&dsv_dir.join("tmp")).is_empty(),
        "no temp file is left"
    );
    let verify = env.json(&with(store, &["verify"]));
    assert_eq!(verify["problems"], serde_json::json!([]), "{verify}");
}

/// A tar archive holding one file `levels` directories deep (`d/d/…/d/f`).
fn deep_tar(levels: usize) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    let path = format!("{}f", "d/".repeat(levels));
    let mut header = tar::Header::new_gnu();
    header.set_size(5);
    header.set_mode(0o644);
    builder
        .append_data(&mut header, &path, &b"deep\n"[..])
        .unwrap();
    builder.into_inner().unwrap()
}

#[test]
fn a_version_4096_levels_deep_is_accepted_and_one_level_more_refused() {
    // No directory on disk nests 4096 levels (its path would be over 8 KiB): an archive does.
    let env = TestEnv::new();
    fs::write(env.path("ok.tar"), deep_tar(4095)).unwrap();
    fs::write(env.path("too-deep.tar"), deep_tar(4096)).unwrap();
    let error = env.json_error(&["import", "too-deep.tar", "--dataset", "deep"], 3);
    let message = error["message"].as_str().unwrap();
    assert!(
        message.ends_with("it is nested more than 4096 levels deep"),
        "{}",
        &message[message.len().saturating_sub(300)..]
    );
    assert_nothing_recorded(&env, &[]);

    env.ok(&["import", "ok.tar", "--dataset", "deep"]);
    let path = format!("{}f", "d/".repeat(4095));
    assert_eq!(env.ok(&["cat", &format!("deep:{path}")]), "deep\n");
    let deepest_dir = format!("deep:{}", &path[..path.len() - 2]);
    let listing = env.json(&["ls", &deepest_dir]);
    let listed: Vec<&str> = listing
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(listed, [path.as_str()]);
    let verify = env.json(&["verify"]);
    assert_eq!(verify["problems"], serde_json::json!([]), "{verify}");
    // The same listing builds the same trees in the library, on a thread's default stack.
    let entries: Vec<dsv::tree::FlatEntry> = (1..=4096)
        .map(|depth| {
            let path = format!(
                "{}{}",
                "d/".repeat(depth - 1),
                if depth < 4096 { "d" } else { "f" }
            );
            let kind = if depth < 4096 {
                dsv::tree::FlatKind::Dir
            } else {
                dsv::tree::FlatKind::File { executable: false }
            };
            dsv::tree::FlatEntry {
                path,
                kind,
                size: if depth < 4096 { 0 } else { 5 },
                id: dsv::ObjectId::of(b"deep\n"),
            }
        })
        .collect();
    let built = std::thread::spawn(move || dsv::tree::build(&entries))
        .join()
        .expect("no stack overflow");
    assert_eq!(built.trees.len(), 4096);
    let show = env.json(&["show", "deep"]);
    assert_eq!(show["tree"], built.root.to_hex(), "{show}");
}
