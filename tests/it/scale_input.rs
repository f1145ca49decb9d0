//! Input at the limits of scale (issue 13, "Bad input"): very many entries in one folder,
//! deep nesting, names and paths at the operating system's limits, and a disk that fills
//! while the catalog grows. What dsv takes round-trips exactly; what it cannot take gets a
//! clear error and leaves nothing recorded or behind.

use std::fs;
use std::path::{Path, PathBuf};

use crate::common::{SmallDisk, TestEnv, assert_same_tree, settle};

/// The longest path (in bytes, without the terminating NUL) Linux opens: PATH_MAX - 1.
const LONGEST_PATH: usize = 4095;

/// The longest name Linux allows (NAME_MAX).
const LONGEST_NAME: usize = 255;

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

/// A chain of directories named `d`, `levels` deep, under `root` (the deepest holds the file
/// `f`), removed on drop. Neither building nor removing it ever names a long path (a chain
/// deeper than about 2,000 levels has no path the system opens): each step makes a new
/// directory and moves the chain into it, or moves the chain's child out and removes the
/// emptied top.
struct Chain {
    root: PathBuf,
}

impl Chain {
    fn make(root: &Path, levels: usize) -> Chain {
        fs::create_dir_all(root).unwrap();
        let chain = Chain {
            root: root.to_path_buf(),
        };
        let (top, spare) = chain.names();
        fs::create_dir(&top).unwrap();
        fs::write(top.join("f"), "at the bottom\n").unwrap();
        for _ in 1..levels {
            fs::create_dir(&spare).unwrap();
            fs::rename(&top, spare.join("d")).unwrap();
            fs::rename(&spare, &top).unwrap();
        }
        chain
    }

    /// Takes over removing the chain under `root` (a checkout's copy of one).
    fn adopt(root: &Path) -> Chain {
        Chain {
            root: root.to_path_buf(),
        }
    }

    fn names(&self) -> (PathBuf, PathBuf) {
        (self.root.join("d"), self.root.join("chain-spare"))
    }
}

impl Drop for Chain {
    fn drop(&mut self) {
        let (top, spare) = self.names();
        let _ = fs::remove_dir_all(&spare);
        while top.is_dir() {
            let below = top.join("d");
            if fs::rename(&below, &spare).is_err() {
                let _ = fs::remove_dir_all(&top);
                break;
            }
            let _ = fs::remove_dir_all(&top);
            let _ = fs::rename(&spare, &top);
        }
    }
}

/// The absolute, canonical path of `relative` in `env` (what the kernel measures).
fn absolute(env: &TestEnv, relative: &str) -> PathBuf {
    fs::canonicalize(env.root()).unwrap().join(relative)
}

// 100,000 files took 140 s here (a debug build on two busy cores), far over the ~30 s a test
// may take: 20,000 (about 20 s) run the same code (one tree object of 20,000 entries, one
// stat cache of 20,000 rows). `scripts/bench-scale` measures the million-file case.
const FILES_IN_ONE_FOLDER: usize = 20_000;

#[test]
fn a_folder_of_many_files_round_trips() {
    let env = TestEnv::new();
    let data = env.path("data");
    fs::create_dir(&data).unwrap();
    for i in 0..FILES_IN_ONE_FOLDER {
        fs::write(data.join(format!("f{i:06}")), i.to_string()).unwrap();
    }
    settle(&env);
    let commit = env.json(&["commit", "data", "--dataset", "flat"]);
    assert_eq!(commit["files"], FILES_IN_ONE_FOLDER);
    env.ok(&["status", "data", "--exit-code"]);
    env.ok(&["checkout", "flat", "copy"]);
    assert_same_tree(&data, &env.path("copy"));
    env.ok(&["audit", "copy", "--full"]);
    env.ok(&["status", "copy", "--exit-code"]);
}

#[test]
fn a_chain_far_deeper_than_a_path_can_reach_is_refused_cleanly() {
    let env = TestEnv::new();
    // 100,000 levels on a tmpfs: made in about 2 s, and gone at once with the unmount. Without
    // root, 5,000 levels on the test's own disk (where 100,000 took over a minute to make and
    // delete): past MAX_TREE_DEPTH and past any path all the same.
    let disk = SmallDisk::mount(&env.path("deep"), "64m");
    let levels = if disk.is_some() { 100_000 } else { 5_000 };
    let chain = Chain::make(&env.path("deep"), levels);
    if disk.is_some() {
        std::mem::forget(chain); // the unmount removes it
    }
    let error = env.json_error(&["commit", "deep", "--dataset", "deep"], 3);
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("levels deep") && message.contains("4096"),
        "the message names the limit: {}",
        tail(message)
    );
    assert_nothing_recorded(&env, &[]);
}

#[test]
fn the_deepest_chain_a_path_holds_round_trips() {
    let env = TestEnv::new();
    // data/d/d/…/d/f: as many levels as fit in the longest path, for the source and the
    // copy alike (both names are four bytes).
    let levels = (LONGEST_PATH - absolute(&env, "data").as_os_str().len() - "/f".len()) / 2;
    assert!(levels > 1900, "{levels} levels");
    let _source = Chain::make(&env.path("data"), levels);
    let _copy = Chain::adopt(&env.path("copy"));
    env.ok(&["commit", "data", "--dataset", "deep"]);
    env.ok(&["status", "data", "--exit-code"]);
    env.ok(&["checkout", "deep", "copy"]);
    assert_same_tree(&env.path("data"), &env.path("copy"));
    env.ok(&["audit", "copy", "--full"]);
    let verify = env.json(&["verify"]);
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
        tail(message)
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

/// `top` with: a file whose name is 255 bytes of ASCII, one of 255 bytes of 2-byte UTF-8
/// characters, one of 3-byte characters, and a file at the end of a path of 255-byte
/// directory names whose absolute path is exactly the longest the system opens.
fn make_names_at_the_limits(env: &TestEnv, top: &str) -> String {
    let root = absolute(env, top);
    fs::create_dir_all(&root).unwrap();
    fs::write(root.join("n".repeat(LONGEST_NAME)), "ascii\n").unwrap();
    let two_byte = format!("{}x", "é".repeat(127));
    let three_byte = "日".repeat(85);
    assert_eq!((two_byte.len(), three_byte.len()), (255, 255));
    fs::write(root.join(&two_byte), "two-byte\n").unwrap();
    fs::write(root.join(&three_byte), "three-byte\n").unwrap();
    let component = "a".repeat(LONGEST_NAME);
    let mut room = LONGEST_PATH - root.as_os_str().len();
    let mut relative = Vec::new();
    while room > 1 + LONGEST_NAME {
        relative.push(component.clone());
        room -= 1 + LONGEST_NAME;
    }
    relative.push("f".repeat(room - 1));
    let relative = relative.join("/");
    let file = root.join(&relative);
    assert_eq!(file.as_os_str().len(), LONGEST_PATH);
    fs::create_dir_all(file.parent().unwrap()).unwrap();
    fs::write(&file, "at the longest path\n").unwrap();
    relative
}

#[test]
fn names_and_paths_at_the_system_limits_round_trip() {
    let env = TestEnv::new();
    let relative = make_names_at_the_limits(&env, "data");
    env.ok(&["commit", "data", "--dataset", "long"]);
    env.ok(&["status", "data", "--exit-code"]);
    // A copy whose own path is as long as the source's: every path still fits.
    env.ok(&["checkout", "long", "copy"]);
    assert_same_tree(&env.path("data"), &env.path("copy"));
    env.ok(&["audit", "copy", "--full"]);
    assert_eq!(
        env.ok(&["cat", &format!("long:{relative}")]),
        "at the longest path\n"
    );
    let verify = env.json(&["verify"]);
    assert_eq!(verify["problems"], serde_json::json!([]), "{verify}");
}

#[test]
fn a_file_past_the_longest_path_is_refused_cleanly() {
    let env = TestEnv::new();
    make_names_at_the_limits(&env, "data");
    // Rename the source to a longer name: its deepest file is now past the limit.
    fs::rename(env.path("data"), env.path("data-longer")).unwrap();
    let error = env.json_error(&["commit", "data-longer", "--dataset", "long"], 3);
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("longer than the operating system"),
        "{}",
        tail(message)
    );
    assert_nothing_recorded(&env, &[]);
}

#[test]
fn a_checkout_past_the_longest_path_is_a_clear_error() {
    let env = TestEnv::new();
    make_names_at_the_limits(&env, "data");
    env.ok(&["commit", "data", "--dataset", "long"]);
    let error = env.json_error(&["checkout", "long", "a-longer-directory"], 6);
    assert!(
        error["causes"][0]
            .as_str()
            .unwrap()
            .contains("File name too long"),
        "{error}"
    );
    assert!(
        error["hints"][0]
            .as_str()
            .is_some_and(|h| h.contains("longer than the operating system allows")),
        "{error}"
    );
    let workspaces = env.json(&["workspace", "ls"]);
    assert_eq!(workspaces.as_array().unwrap().len(), 1, "{workspaces}");
}

#[test]
fn a_checkout_past_the_longest_path_fails_and_leaves_nothing() {
    let env = TestEnv::new();
    make_names_at_the_limits(&env, "data");
    env.ok(&["commit", "data", "--dataset", "long"]);
    fs::create_dir(env.path("a-longer-directory")).unwrap();
    let error = env.json_error(&["checkout", "long", "a-longer-directory"], 6);
    assert!(
        error["hints"][0]
            .as_str()
            .is_some_and(|h| h.contains("shorter path")),
        "{error}"
    );
    assert!(
        names(&env.path("a-longer-directory")).is_empty(),
        "nothing is left behind: {:?}",
        names(&env.path("a-longer-directory"))
    );
    assert_eq!(env.json(&["workspace", "ls"]).as_array().unwrap().len(), 1);
}

#[test]
fn a_disk_filled_by_the_catalog_is_a_clear_error_and_records_nothing() {
    let env = TestEnv::bare();
    let Some((_disk, store)) = SmallDisk::with_store(&env, "16m") else {
        return; // skipped: SmallDisk::mount reported why
    };
    let at = ["--store", store.as_str()];
    // 30,000 tiny files: a pack of a few hundred KiB, but tens of thousands of catalog
    // rows (objects, files, the stat cache), about 7 MiB of catalog, beside about 2 MiB of
    // the commit's unnamed temporary files (its listing, the ids of the files read). With
    // 5 MiB free the disk fills while the rows are inserted; with 7 MiB, when the commit
    // writes them out (after the ref log has its line).
    fs::create_dir(env.path("data")).unwrap();
    for i in 0..30_000 {
        fs::write(env.path(&format!("data/f{i:05}")), format!("{i}\n")).unwrap();
    }
    let ballast = env.path("small/ballast");
    let reflog = env.path("small/.dsv/reflog");
    let reflog_before = fs::read_to_string(&reflog).unwrap();
    for free_mib in [5, 7] {
        fs::write(&ballast, vec![1u8; (16 - free_mib) * 1024 * 1024]).unwrap();
        let error = env.json_error(&with(&at, &["commit", "data", "--dataset", "d"]), 6);
        assert_eq!(error["kind"], "io");
        let message = error["message"].as_str().unwrap();
        assert!(
            message.contains("catalog") && message.contains("disk is full"),
            "{free_mib} MiB free: the message says the catalog's disk is full: {error}"
        );
        assert!(
            error["hints"][0]
                .as_str()
                .unwrap()
                .contains("free some disk space"),
            "{error}"
        );
        assert_nothing_recorded(&env, &at);
        assert_eq!(
            fs::read_to_string(&reflog).unwrap(),
            reflog_before,
            "{free_mib} MiB free: the ref log names no version that was never recorded"
        );
    }

    // Once there is room, the same commit succeeds and the store is whole.
    fs::remove_file(&ballast).unwrap();
    let commit = env.json(&with(&at, &["commit", "data", "--dataset", "d"]));
    assert_eq!(commit["files"], 30_000);
    env.ok(&with(&at, &["status", "data", "--exit-code"]));
    let verify = env.json(&with(&at, &["verify"]));
    assert_eq!(verify["problems"], serde_json::json!([]), "{verify}");
    assert!(!env.path("small/.dsv/reflog.unapplied").exists());
}

/// The last 300 bytes or so of `text` (whole characters): error messages here end with paths
/// of thousands of bytes, and a failed assertion shows their end.
fn tail(text: &str) -> &str {
    let mut start = text.len().saturating_sub(300);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

#[test]
fn a_checkout_whose_stat_spill_fills_its_disk_still_applies_everything() {
    // Checkout spills the lstat of each file it renames into place to `.dsv/tmp` (37 bytes
    // a file, written a MiB at a time). Once applying has begun it must run to its end: a
    // spill that cannot be written leaves the files out of the stat cache, nothing more.
    let env = TestEnv::new();
    fs::create_dir(env.path("data")).unwrap();
    // 30,000 records are 1.1 MB: more than the spill's 1 MiB buffer, so a write fails
    // while applying, not only at the end.
    for i in 0..30_000 {
        fs::write(env.path(&format!("data/f{i:05}")), format!("{i}\n")).unwrap();
    }
    env.ok(&["commit", "data", "--dataset", "d"]);
    let Some(_disk) = SmallDisk::mount(&env.path(".dsv/tmp"), "64k") else {
        return; // skipped: SmallDisk::mount reported why
    };
    env.ok(&["checkout", "d", "out"]);
    assert_same_tree(&env.path("data"), &env.path("out"));
    // The files it wrote have no stat cache entry (the spill failed): status hashes every
    // one, and finds them as the version has them.
    let status = env.json(&["status", "out"]);
    assert_eq!(status["changes"], serde_json::json!([]), "{status}");
    assert_eq!(status["files_hashed"], 30_000, "{status}");
}
