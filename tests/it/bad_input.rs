//! Bad input gets a clear error, the documented exit code, and changes nothing.

use std::fs;
use std::os::unix::fs::symlink;

use crate::common::{SmallDisk, TestEnv, pseudo_random};

/// Every file under `.dsv/` with its bytes, to prove a failed command wrote nothing.
fn store_bytes(env: &TestEnv) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in walkdir::WalkDir::new(env.path(".dsv")).sort_by_file_name() {
        let entry = entry.unwrap();
        let name = entry.path().to_str().unwrap().to_string();
        if entry.file_type().is_file()
            && !name.ends_with("-shm")
            && !name.ends_with(".lock")
            && !name.ends_with("/lock")
        {
            out.push((name, fs::read(entry.path()).unwrap()));
        }
    }
    out
}

#[test]
fn no_store_says_how_to_make_one() {
    let env = TestEnv::bare();
    let stderr = env.fails(&["ls"], 3);
    assert!(
        stderr.contains("no dsv store found") && stderr.contains("dsv init"),
        "{stderr}"
    );
    env.ok(&["init"]);
    let stderr = env.fails(&["init"], 3);
    assert!(stderr.contains("already exists"), "{stderr}");
}

#[test]
fn unknown_names_are_user_errors_with_hints() {
    let env = TestEnv::new();
    env.write("data/a", "a");
    env.ok(&["commit", "data", "--dataset", "d", "--tag", "v1"]);
    let error = env.json_error(&["checkout", "nope", "out"], 3);
    assert_eq!(error["message"], "unknown dataset \"nope\"");
    assert!(
        !env.path("out").exists(),
        "nothing created for a bad revision"
    );
    let error = env.json_error(&["show", "d@v9"], 3);
    assert_eq!(error["message"], "unknown revision \"d@v9\"");
    assert!(error["hints"][0].as_str().unwrap().contains("dsv log d"));
    env.fails(&["show", "d@latest~5"], 3);
    env.fails(&["show", "d@ffffffff"], 3);
    env.fails(&["show", "bad name"], 3);
    env.fails(&["cat", "d:missing"], 3);
    env.fails(&["ls", "d:missing/dir"], 3);
    env.fails(&["log", "nope"], 3);
}

#[test]
fn invalid_names_and_arguments_are_refused_before_anything_is_written() {
    let env = TestEnv::new();
    env.write("data/a", "a");
    let before = store_bytes(&env);
    for name in ["", "-x", ".hidden", "a/b", "a@b", "spaces are bad"] {
        env.fails(&["commit", "data", &format!("--dataset={name}")], 3);
    }
    env.fails(&["commit", "data", "--dataset", "d", "--tag", "latest"], 3);
    env.fails(
        &[
            "commit",
            "data",
            "--dataset",
            "d",
            "--compression-level",
            "40",
        ],
        2,
    );
    env.fails(&["frobnicate"], 2);
    assert_eq!(before, store_bytes(&env));
}

#[test]
fn a_missing_or_non_directory_source_is_refused() {
    let env = TestEnv::new();
    env.write("file.txt", "x");
    let before = store_bytes(&env);
    let error = env.json_error(&["commit", "missing", "--dataset", "d"], 3);
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .ends_with("missing does not exist"),
        "{error}"
    );
    env.fails(&["commit", "file.txt", "--dataset", "d"], 3);
    env.fails(&["status", "file.txt"], 3);
    env.fails(&["status", "."], 3); // not a workspace
    assert_eq!(before, store_bytes(&env));
    // Checkout into a path that is a file.
    env.write("data/a", "a");
    env.ok(&["commit", "data", "--dataset", "d"]);
    env.fails(&["checkout", "d", "file.txt"], 3);
    assert_eq!(fs::read_to_string(env.path("file.txt")).unwrap(), "x");
}

#[test]
fn symlinks_leaving_the_directory_are_refused_and_nothing_is_recorded() {
    let env = TestEnv::new();
    env.write("data/a", "a");
    symlink("../../etc/passwd", env.path("data/escape")).unwrap();
    let before = store_bytes(&env);
    let error = env.json_error(&["commit", "data", "--dataset", "d"], 3);
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("points outside the directory"),
        "{error}"
    );
    fs::remove_file(env.path("data/escape")).unwrap();
    symlink("/etc/passwd", env.path("data/absolute")).unwrap();
    env.fails(&["commit", "data", "--dataset", "d"], 3);
    assert_eq!(before, store_bytes(&env));
    assert_eq!(env.json(&["ls"]).as_array().unwrap().len(), 0);
}

#[test]
fn non_utf8_names_and_special_files_are_refused() {
    use std::os::unix::ffi::OsStrExt;
    let env = TestEnv::new();
    env.write("data/a", "a");
    let bad = env
        .path("data")
        .join(std::ffi::OsStr::from_bytes(b"bad\xff"));
    fs::write(&bad, "x").unwrap();
    let error = env.json_error(&["commit", "data", "--dataset", "d"], 3);
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("not valid UTF-8"),
        "{error}"
    );
    fs::remove_file(&bad).unwrap();
    let fifo = env.path("data/fifo");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let error = env.json_error(&["commit", "data", "--dataset", "d"], 3);
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("socket, FIFO or device"),
        "{error}"
    );
}

/// Flips one byte in the middle of every pack.
/// Rewrites every pack `edit` changes (it returns whether it changed the bytes), making the
/// read-only pack writable first; returns how many were rewritten.
fn edit_packs(
    env: &TestEnv,
    mut edit: impl FnMut(&std::path::Path, &mut Vec<u8>) -> bool,
) -> usize {
    let mut edited = 0;
    for entry in fs::read_dir(env.path(".dsv/packs")).unwrap() {
        let path = entry.unwrap().path();
        let mut bytes = fs::read(&path).unwrap();
        if edit(&path, &mut bytes) {
            fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o644))
                .unwrap();
            fs::write(&path, bytes).unwrap();
            edited += 1;
        }
    }
    edited
}

/// Flips one byte a third of the way into every pack.
fn corrupt_packs(env: &TestEnv) {
    edit_packs(env, |_, bytes| {
        let middle = bytes.len() / 3;
        bytes[middle] ^= 0x55;
        true
    });
}

#[test]
fn a_corrupt_pack_is_detected_by_hash_and_nothing_is_written() {
    let env = TestEnv::new();
    env.write("data/big.bin", pseudo_random(3_000_000, 5));
    env.ok(&["commit", "data", "--dataset", "d"]);
    corrupt_packs(&env);
    let error = env.json_error(&["checkout", "d", "out"], 5);
    assert_eq!(error["kind"], "corrupt");
    assert!(
        error["message"].as_str().unwrap().contains(".pack"),
        "the error names the pack: {error}"
    );
    assert!(
        !env.path("out/big.bin").exists(),
        "no partial file is left behind"
    );
    let leftovers: Vec<_> = fs::read_dir(env.path("out")).unwrap().collect();
    assert!(leftovers.is_empty(), "no temporary file is left behind");
    env.fails(&["cat", "d:big.bin"], 5);
    let report = env.json_error(&["verify"], 5);
    assert!(
        report.is_null(),
        "verify reports problems as data, not as an error object"
    );
    let out = env.run(&["--json", "verify"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        report["problems"][0]
            .as_str()
            .unwrap()
            .contains("do not hash to its name"),
        "{report}"
    );
}

#[test]
fn a_truncated_or_deleted_pack_is_reported() {
    let env = TestEnv::new();
    env.write("data/big.bin", pseudo_random(2_000_000, 6));
    env.ok(&["commit", "data", "--dataset", "d"]);
    let pack = fs::read_dir(env.path(".dsv/packs"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let bytes = fs::read(&pack).unwrap();
    fs::write(&pack, &bytes[..bytes.len() / 2]).unwrap();
    env.fails(&["checkout", "d", "out"], 5);
    fs::remove_file(&pack).unwrap();
    let error = env.json_error(&["checkout", "d", "out2"], 5);
    assert!(
        error["message"].as_str().unwrap().contains(".pack"),
        "{error}"
    );
    env.fails(&["verify"], 5);
}

#[test]
fn a_corrupt_catalog_is_reported_with_its_path() {
    let env = TestEnv::new();
    env.write("data/a", "a");
    env.ok(&["commit", "data", "--dataset", "d"]);
    for suffix in ["-wal", "-shm"] {
        let _ = fs::remove_file(env.path(&format!(".dsv/catalog.db{suffix}")));
    }
    fs::write(env.path(".dsv/catalog.db"), pseudo_random(16384, 2)).unwrap();
    let error = env.json_error(&["ls"], 5);
    assert!(
        error["message"].as_str().unwrap().contains("catalog.db"),
        "{error}"
    );
}

#[test]
fn a_store_from_a_newer_dsv_is_refused_untouched() {
    let env = TestEnv::new();
    let conn = rusqlite::Connection::open(env.path(".dsv/catalog.db")).unwrap();
    conn.pragma_update(None, "user_version", 999).unwrap();
    drop(conn);
    let before = store_bytes(&env);
    let error = env.json_error(&["ls"], 3);
    assert!(
        error["message"].as_str().unwrap().contains("newer dsv"),
        "{error}"
    );
    assert_eq!(error["hints"][0], "upgrade dsv to open this store");
    assert_eq!(before, store_bytes(&env));
}

#[test]
fn a_tree_naming_a_path_that_escapes_is_refused_at_checkout() {
    use dsv::object::{EntryKind, TreeEntry};
    // Build a malicious store by hand: a tree whose symlink climbs out.
    let env = TestEnv::new();
    env.write("data/a", "a");
    env.ok(&["commit", "data", "--dataset", "d"]);
    crate::common::plant_one_entry(
        &env,
        "d",
        TreeEntry {
            name: "evil".into(),
            kind: EntryKind::Symlink {
                target: "../../outside".into(),
            },
            size: 13,
            id: dsv::ObjectId::of(b"../../outside"),
        },
    );
    let error = env.json_error(&["checkout", "d", "out"], 5);
    assert!(
        error["message"].as_str().unwrap().contains("unsafe path"),
        "{error}"
    );
    assert!(
        fs::symlink_metadata(env.path("out/evil")).is_err(),
        "the link was not created"
    );
}

#[test]
fn a_full_disk_is_a_clear_error_and_records_nothing() {
    let env = TestEnv::bare();
    let Some((_disk, store)) = SmallDisk::with_store(&env, "3m") else {
        return; // skipped: SmallDisk::mount reported why
    };
    env.write("data/big.bin", pseudo_random(8_000_000, 77));
    let error = env.json_error(&["--store", &store, "commit", "data", "--dataset", "d"], 6);
    assert_eq!(error["kind"], "io");
    assert!(
        error["hints"][0]
            .as_str()
            .unwrap()
            .contains("free some disk space"),
        "{error}"
    );
    assert_eq!(
        env.json(&["--store", &store, "ls"])
            .as_array()
            .unwrap()
            .len(),
        0
    );
    let temp_files: Vec<_> = fs::read_dir(env.path("small/.dsv/tmp")).unwrap().collect();
    assert!(temp_files.is_empty(), "the partial pack is removed");
    // Once there is room, the next commit succeeds.
    env.write("small-data/a.txt", "fits\n");
    env.ok(&["--store", &store, "commit", "small-data", "--dataset", "d"]);
    assert_eq!(
        env.json(&["--store", &store, "verify"])["problems"]
            .as_array()
            .unwrap()
            .len(),
        0
    );
}

#[test]
fn names_dsv_reserves_are_refused() {
    let env = TestEnv::new();
    env.write("data/sub/.dsv", "a file named like the store");
    let error = env.json_error(&["commit", "data", "--dataset", "d"], 3);
    assert!(
        error["message"].as_str().unwrap().contains("reserves"),
        "{error}"
    );
    fs::remove_file(env.path("data/sub/.dsv")).unwrap();
    fs::create_dir_all(env.path("data/.dsv-tmp-mine")).unwrap();
    env.fails(&["commit", "data", "--dataset", "d"], 3);
    fs::remove_dir(env.path("data/.dsv-tmp-mine")).unwrap();
    // dsv's own leftovers (a dead process's temp file) are skipped, and checkout removes them.
    env.write("data/.dsv-tmp-999999999-1", "leftover");
    env.ok(&["commit", "data", "--dataset", "d"]);
    env.ok(&["checkout", "d", "data"]);
    assert!(!env.path("data/.dsv-tmp-999999999-1").exists());
}

#[test]
fn a_symlink_through_another_symlink_is_refused() {
    let env = TestEnv::new();
    fs::create_dir_all(env.path("data/d")).unwrap();
    symlink("..", env.path("data/d/l")).unwrap(); // inside on its own: d/.. is the root
    symlink("d/l/..", env.path("data/x")).unwrap(); // through d/l: the root's parent
    let error = env.json_error(&["commit", "data", "--dataset", "d"], 3);
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("passes through another symlink"),
        "{error}"
    );
    // A link to a link (not through it) is fine.
    fs::remove_file(env.path("data/x")).unwrap();
    symlink("d/l", env.path("data/x")).unwrap();
    env.ok(&["commit", "data", "--dataset", "d"]);
}

/// Commits `data` as d@v1 and, after `edit`, as d@v2; checks out v1 into `work`, flips a
/// byte in the middle of the one pack v2 added, and checks that a checkout of v2 into
/// `work` fails (exit 5) and leaves it as it was: no file changed, no temporary name left,
/// nothing for status to report.
fn a_checkout_of_corrupt_v2_changes_nothing(env: &TestEnv, edit: impl FnOnce()) {
    env.ok(&["commit", "data", "--dataset", "d", "--tag", "v1"]);
    let packs_before: Vec<_> = fs::read_dir(env.path(".dsv/packs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    edit();
    env.ok(&["commit", "data", "--dataset", "d", "--tag", "v2"]);
    env.ok(&["checkout", "d@v1", "work"]);
    let before = crate::common::snapshot_tree(&env.path("work"));
    let corrupted = edit_packs(env, |path, bytes| {
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0x55;
        !packs_before.iter().any(|p| p == path)
    });
    assert_eq!(corrupted, 1);
    env.fails(&["checkout", "d@v2", "work"], 5);
    assert_eq!(
        crate::common::snapshot_tree(&env.path("work")),
        before,
        "nothing changed and no temporary name is left"
    );
    env.ok(&["status", "work", "--exit-code"]);
}

#[test]
fn a_checkout_that_meets_corrupt_data_leaves_the_directory_as_it_was() {
    let env = TestEnv::new();
    env.write("data/keep.txt", "same in both\n");
    env.write("data/a.txt", "v1\n");
    env.write("data/c.txt", "only in v1\n");
    // The middle of v2's pack is in a.txt's 3 MB.
    a_checkout_of_corrupt_v2_changes_nothing(&env, || {
        env.write("data/a.txt", pseudo_random(3_000_000, 8));
        fs::remove_file(env.path("data/c.txt")).unwrap();
    });
    env.ok(&["checkout", "d@v1", "work"]);
}

#[test]
fn a_checkout_that_meets_corrupt_data_after_a_staged_round_removes_every_temporary_name() {
    // Checkout stages in rounds of 32,768 files: the first round here is 33,000 edited files
    // staged beside their destinations; the corrupt file comes after it in path order.
    let env = TestEnv::new();
    let count = 33_000;
    for n in 0..count {
        env.write(&format!("data/sub/f{n:05}"), format!("v1 {n}\n"));
    }
    // The middle of v2's pack is in big.bin's frames (3 MB against 33,000 short files).
    a_checkout_of_corrupt_v2_changes_nothing(&env, || {
        for n in 0..count {
            env.write(&format!("data/sub/f{n:05}"), format!("v2 {n}\n"));
        }
        env.write("data/zz/big.bin", pseudo_random(3_000_000, 9));
    });
}

#[test]
fn a_hostile_file_map_length_is_caught_before_any_byte_is_served() {
    let env = TestEnv::new();
    env.write("data/big.bin", pseudo_random(1_500_000, 12)); // incompressible: frames stored raw
    env.ok(&["commit", "data", "--dataset", "d"]);
    let edited = edit_packs(&env, |_, bytes| {
        let Some(at) = bytes.windows(8).position(|w| w == b"DSVFMAP1") else {
            return false;
        };
        // The first chunk's length: after the magic, the count and the chunk id.
        let field = at + 8 + 4 + 32;
        let length = u32::from_le_bytes(bytes[field..field + 4].try_into().unwrap());
        bytes[field..field + 4].copy_from_slice(&(length - 1000).to_le_bytes());
        true
    });
    assert_eq!(edited, 1, "found the file map in a raw frame");
    let out = env.run(&["cat", "d:big.bin", "--range", "0..100000"]);
    assert_eq!(
        out.status.code(),
        Some(5),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stdout.is_empty(),
        "no byte served from a lying file map"
    );
    env.fails(&["checkout", "d", "out"], 5);
}

#[test]
fn a_nested_store_is_never_deleted_by_checkout() {
    let env = TestEnv::new();
    env.write("ws/proj", "a file\n");
    env.ok(&["commit", "ws", "--dataset", "d"]);
    fs::create_dir_all(env.path("w2")).unwrap();
    env.ok(&["init", "--force", env.path("w2/proj").to_str().unwrap()]);
    let error = env.json_error(&["checkout", "d", "w2", "--force"], 4);
    assert!(
        error["message"].as_str().unwrap().contains("proj"),
        "{error}"
    );
    assert!(env.path("w2/proj/.dsv/catalog.db").exists());
}
