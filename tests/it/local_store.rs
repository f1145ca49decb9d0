//! commit → checkout → status → diff on real directories, asserted on `--json` output.

use std::fs;
use std::os::unix::fs::symlink;

use crate::common::{TestEnv, assert_same_tree, make_executable, pseudo_random, settle};

/// A tree with every kind of entry dsv versions.
fn sample_tree(env: &TestEnv, dir: &str) {
    env.write(&format!("{dir}/a.txt"), "alpha\n");
    env.write(&format!("{dir}/empty"), "");
    env.write(
        &format!("{dir}/nested/deeper/b.bin"),
        pseudo_random(700_000, 1),
    );
    env.write(&format!("{dir}/nested/c.csv"), "x,y\n1,2\n");
    env.write(&format!("{dir}/run.sh"), "#!/bin/sh\necho hi\n");
    make_executable(&env.path(&format!("{dir}/run.sh")));
    fs::create_dir_all(env.path(&format!("{dir}/empty-dir/inner"))).unwrap();
    symlink("nested/c.csv", env.path(&format!("{dir}/link"))).unwrap();
    env.write(&format!("{dir}/ünïcode name.txt"), "names are UTF-8\n");
}

#[test]
fn commit_then_checkout_gives_back_every_kind_of_entry() {
    let env = TestEnv::new();
    sample_tree(&env, "data");
    let commit = env.json(&[
        "commit",
        "data",
        "--dataset",
        "sample",
        "-m",
        "first",
        "--tag",
        "v1",
    ]);
    assert_eq!(commit["created"], true);
    assert_eq!(commit["files"], 7);
    assert_eq!(commit["tag"], "v1");
    let version = commit["version"].as_str().unwrap().to_string();

    let checkout = env.json(&["checkout", "sample@v1", "out"]);
    assert_eq!(checkout["version"], version.as_str());
    assert_eq!(checkout["written"], 7);
    assert_same_tree(&env.path("data"), &env.path("out"));

    // A file's id is the BLAKE3 of its bytes, as b3sum prints it.
    let ls = env.json(&["ls", "sample@v1:nested/c.csv"]);
    assert_eq!(ls[0]["id"], blake3::hash(b"x,y\n1,2\n").to_hex().as_str());
    let status = env.json(&["status", "out"]);
    assert_eq!(status["changes"].as_array().unwrap().len(), 0);
}

#[test]
fn recommitting_an_unchanged_tree_reads_nothing_and_records_nothing() {
    let env = TestEnv::new();
    sample_tree(&env, "data");
    settle(&env);
    let first = env.json(&["commit", "data", "--dataset", "d"]);
    let second = env.json(&["commit", "data", "--dataset", "d"]);
    assert_eq!(second["created"], false);
    assert_eq!(second["files_read"], 0);
    assert_eq!(second["version"], first["version"]);
    assert_eq!(env.json(&["log", "d"]).as_array().unwrap().len(), 1);

    // One small edit: only that file is read; only its chunk and the trees on its path are new.
    let objects_before = env.json(&["verify"])["objects"].as_u64().unwrap();
    env.write("data/nested/c.csv", "x,y\n1,2\n3,4\n");
    let third = env.json(&["commit", "data", "--dataset", "d", "-m", "edit"]);
    let objects_after = env.json(&["verify"])["objects"].as_u64().unwrap();
    // One chunk, the trees of `nested/` and the root (not `nested/deeper/`), one version.
    assert_eq!(objects_after - objects_before, 4);
    assert_eq!(third["created"], true);
    assert_eq!(third["files_read"], 1);
    assert_eq!(third["new_chunks"], 1);
    assert_eq!(third["parent"], first["version"]);
    let diff = env.json(&["diff", "d"]);
    let changes = diff["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0]["path"], "nested/c.csv");
    assert_eq!(changes[0]["change"], "modified");
}

#[test]
fn allow_empty_records_a_version_with_the_same_tree() {
    let env = TestEnv::new();
    env.write("data/a", "a");
    let first = env.json(&["commit", "data", "--dataset", "d"]);
    let second = env.json(&[
        "commit",
        "data",
        "--dataset",
        "d",
        "--allow-empty",
        "-m",
        "again",
    ]);
    assert_eq!(second["created"], true);
    assert_ne!(second["version"], first["version"]);
    assert_eq!(second["parent"], first["version"]);
}

#[test]
fn status_reports_added_modified_deleted_and_exit_code() {
    let env = TestEnv::new();
    sample_tree(&env, "data");
    env.ok(&["commit", "data", "--dataset", "d"]);
    env.ok(&["checkout", "d", "work"]);
    env.ok(&["status", "work", "--exit-code"]);

    env.write("work/a.txt", "changed\n");
    env.write("work/new.txt", "new\n");
    fs::remove_file(env.path("work/nested/c.csv")).unwrap();
    make_executable(&env.path("work/empty"));
    let status = env.json(&["status", "work"]);
    let changes: Vec<(String, String)> = status["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["path"].as_str().unwrap().to_string(),
                c["change"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        changes,
        [
            ("a.txt".to_string(), "modified".to_string()),
            ("empty".to_string(), "modified".to_string()),
            ("nested/c.csv".to_string(), "deleted".to_string()),
            ("new.txt".to_string(), "added".to_string()),
        ]
    );
    env.fails(&["status", "work", "--exit-code"], 1);
}

#[test]
fn an_edit_right_after_a_commit_is_seen() {
    // The stat cache entry the commit recorded must not hide an edit that follows at once
    // (the racy-timestamp rule itself is unit-tested in workspace.rs).
    let env = TestEnv::new();
    env.write("data/f", "aaaa");
    env.ok(&["commit", "data", "--dataset", "d"]);
    env.write("data/f", "bbbb");
    let status = env.json(&["status", "data"]);
    assert_eq!(status["changes"][0]["path"], "f");
    assert_eq!(status["changes"][0]["change"], "modified");
}

#[test]
fn checkout_switches_versions_writing_only_what_differs() {
    let env = TestEnv::new();
    for i in 0..50 {
        env.write(&format!("data/f{i:02}"), format!("file {i}\n"));
    }
    env.ok(&["commit", "data", "--dataset", "d", "--tag", "one"]);
    env.write("data/f07", "changed\n");
    fs::remove_file(env.path("data/f08")).unwrap();
    env.write("data/sub/new", "new\n");
    env.ok(&["commit", "data", "--dataset", "d", "--tag", "two"]);

    env.ok(&["checkout", "d@one", "work"]);
    let switch = env.json(&["checkout", "d@two", "work"]);
    assert_eq!(switch["written"], 2, "only f07 and sub/new differ");
    assert_eq!(switch["deleted"], 1);
    assert_eq!(switch["unchanged"], 48);
    assert_same_tree(&env.path("data"), &env.path("work"));

    let back = env.json(&["checkout", "d@one", "work"]);
    assert_eq!(back["written"], 2, "f07 and f08");
    assert!(
        !env.path("work/sub").exists(),
        "a directory only the newer version had is removed"
    );
    env.ok(&["status", "work", "--exit-code"]);
}

#[test]
fn checkout_refuses_to_overwrite_uncommitted_changes_unless_forced() {
    let env = TestEnv::new();
    env.write("data/keep.txt", "v1\n");
    env.write("data/gone.txt", "v1\n");
    env.ok(&["commit", "data", "--dataset", "d", "--tag", "v1"]);
    env.write("data/keep.txt", "v2\n");
    fs::remove_file(env.path("data/gone.txt")).unwrap();
    env.ok(&["commit", "data", "--dataset", "d", "--tag", "v2"]);

    env.ok(&["checkout", "d@v1", "work"]);
    env.write("work/keep.txt", "my precious edit\n");
    env.write("work/gone.txt", "edited too\n");
    env.write("work/untracked.txt", "mine\n");
    let stderr = env.fails(&["checkout", "d@v2", "work"], 4);
    assert!(
        stderr.contains("keep.txt") && stderr.contains("gone.txt"),
        "{stderr}"
    );
    assert_eq!(
        fs::read_to_string(env.path("work/keep.txt")).unwrap(),
        "my precious edit\n"
    );
    assert_eq!(
        fs::read_to_string(env.path("work/gone.txt")).unwrap(),
        "edited too\n"
    );
    let status = env.json(&["status", "work"]);
    assert_eq!(
        status["version"],
        env.json(&["show", "d@v1"])["id"],
        "the workspace still holds v1"
    );

    env.ok(&["checkout", "d@v2", "work", "--force"]);
    assert_eq!(
        fs::read_to_string(env.path("work/keep.txt")).unwrap(),
        "v2\n"
    );
    assert!(!env.path("work/gone.txt").exists());
    assert_eq!(
        fs::read_to_string(env.path("work/untracked.txt")).unwrap(),
        "mine\n",
        "untracked files stay"
    );
}

#[test]
fn checkout_into_a_directory_with_identical_untracked_files_adopts_them() {
    let env = TestEnv::new();
    env.write("data/a", "same\n");
    env.write("data/b", "theirs\n");
    env.ok(&["commit", "data", "--dataset", "d"]);
    env.write("work/a", "same\n");
    env.write("work/b", "mine\n");
    let error = env.json_error(&["checkout", "d", "work"], 4);
    assert_eq!(error["kind"], "conflict");
    assert!(
        error["message"].as_str().unwrap().ends_with(": b"),
        "{error}"
    );
    fs::remove_file(env.path("work/b")).unwrap();
    let report = env.json(&["checkout", "d", "work"]);
    assert_eq!(report["written"], 1);
    assert_eq!(report["unchanged"], 1);
}

#[test]
fn a_file_can_become_a_directory_and_back() {
    let env = TestEnv::new();
    env.write("data/x", "file\n");
    env.ok(&["commit", "data", "--dataset", "d", "--tag", "file"]);
    fs::remove_file(env.path("data/x")).unwrap();
    env.write("data/x/inner", "now a dir\n");
    env.ok(&["commit", "data", "--dataset", "d", "--tag", "dir"]);
    env.ok(&["checkout", "d@file", "work"]);
    env.ok(&["checkout", "d@dir", "work"]);
    assert_eq!(
        fs::read_to_string(env.path("work/x/inner")).unwrap(),
        "now a dir\n"
    );
    env.ok(&["checkout", "d@file", "work"]);
    assert_eq!(fs::read_to_string(env.path("work/x")).unwrap(), "file\n");
}

#[test]
fn revisions_resolve_by_tag_prefix_and_ancestry() {
    let env = TestEnv::new();
    let mut ids = Vec::new();
    for i in 0..3 {
        env.write("data/f", format!("{i}"));
        ids.push(
            env.json(&["commit", "data", "--dataset", "d", "-m", &format!("v{i}")])["version"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    env.ok(&["tag", "d@latest~2", "first"]);
    let show = |rev: &str| env.json(&["show", rev])["id"].as_str().unwrap().to_string();
    assert_eq!(show("d"), ids[2]);
    assert_eq!(show("d@latest"), ids[2]);
    assert_eq!(show("d@latest~1"), ids[1]);
    assert_eq!(show("d~2"), ids[0]);
    assert_eq!(show("d@first"), ids[0]);
    assert_eq!(show(&format!("d@{}", &ids[1][..8])), ids[1]);
    assert_eq!(show("d@first~0"), ids[0]);
    env.fails(&["show", "d@first~1"], 3);
    let log = env.json(&["log", "d"]);
    let logged: Vec<&str> = log
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["id"].as_str().unwrap())
        .collect();
    assert_eq!(logged, [ids[2].as_str(), ids[1].as_str(), ids[0].as_str()]);
    assert_eq!(log[2]["tags"][0], "first");
    // Tags do not move silently.
    env.fails(&["tag", "d", "first"], 3);
    env.ok(&["tag", "d", "first", "--force"]);
    assert_eq!(show("d@first"), ids[2]);
}

#[test]
fn cat_writes_a_file_or_a_byte_range() {
    let env = TestEnv::new();
    let big = pseudo_random(1_500_000, 9);
    env.write("data/big.bin", &big);
    env.write("data/small.txt", "hello world");
    env.ok(&["commit", "data", "--dataset", "d"]);
    let out = env.dsv().args(["cat", "d:big.bin"]).output().unwrap();
    assert!(out.status.success());
    assert_eq!(out.stdout, big);
    let out = env
        .dsv()
        .args(["cat", "d:big.bin", "--range", "1000000..1000100"])
        .output()
        .unwrap();
    assert_eq!(out.stdout, &big[1_000_000..1_000_100]);
    let out = env
        .dsv()
        .args(["cat", "d:small.txt", "--range", "6.."])
        .output()
        .unwrap();
    assert_eq!(out.stdout, b"world");
    env.fails(&["cat", "d:nope"], 3);
}

#[test]
fn ls_lists_datasets_and_files() {
    let env = TestEnv::new();
    sample_tree(&env, "data");
    env.ok(&["commit", "data", "--dataset", "d"]);
    env.ok(&["commit", "data", "--dataset", "other"]);
    let datasets = env.json(&["ls"]);
    let names: Vec<&str> = datasets
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["d", "other"]);
    assert_eq!(datasets[0]["files"], 7);
    let nested = env.json(&["ls", "d:nested"]);
    let paths: Vec<&str> = nested
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        ["nested/c.csv", "nested/deeper", "nested/deeper/b.bin"]
    );
    assert_eq!(nested[2]["size"], 700_000);
}

#[test]
fn the_store_is_never_committed_and_is_found_from_subdirectories() {
    let env = TestEnv::new();
    env.write("a.txt", "top\n");
    env.write("sub/b.txt", "below\n");
    let commit = env.json(&["commit", ".", "--dataset", "self"]);
    assert_eq!(commit["files"], 2, ".dsv is skipped");
    let out = env
        .dsv()
        .current_dir(env.path("sub"))
        .args(["--json", "ls"])
        .output()
        .unwrap();
    assert!(out.status.success());
    // And --store / DSV_STORE point elsewhere.
    let other = TestEnv::bare();
    let json = other
        .dsv()
        .args(["--json", "ls"])
        .env("DSV_STORE", env.path(".dsv"))
        .output()
        .unwrap();
    assert!(
        json.status.success(),
        "{}",
        String::from_utf8_lossy(&json.stderr)
    );
}

#[test]
fn verify_reports_a_consistent_store() {
    let env = TestEnv::new();
    sample_tree(&env, "data");
    env.ok(&["commit", "data", "--dataset", "d"]);
    let report = env.json(&["verify"]);
    assert_eq!(report["problems"].as_array().unwrap().len(), 0);
    assert_eq!(report["versions"], 1);
    assert!(report["objects"].as_u64().unwrap() >= 8);
}

#[test]
fn a_flat_directory_of_many_files_commits_lists_and_pipes() {
    let env = TestEnv::new();
    let name = "n".repeat(200);
    for i in 0..20_000 {
        env.write(&format!("data/{name}{i:05}"), "");
    }
    let commit = env.json(&["commit", "data", "--dataset", "flat"]);
    assert_eq!(commit["files"], 20_000);
    let report = env.json(&["verify"]);
    assert_eq!(report["problems"].as_array().unwrap().len(), 0);
    // Output larger than a pipe buffer, cut short by the reader: exit 0, no error.
    for json in ["", "--json"] {
        let script = format!(
            "set -o pipefail; {} {json} ls flat | head -c 100 >/dev/null",
            env!("CARGO_BIN_EXE_dsv")
        );
        let mut bash = std::process::Command::new("bash");
        env.sandbox().apply(&mut bash);
        let out = bash.args(["-c", &script]).output().unwrap();
        assert!(
            out.status.success(),
            "{json}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.stderr.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn line_breaks_in_the_author_do_not_break_the_version() {
    let env = TestEnv::new();
    env.write("data/a", "a");
    let out = env
        .dsv()
        .args(["commit", "data", "--dataset", "d"])
        .env("DSV_AUTHOR", "Ada\nLovelace")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(env.json(&["show", "d"])["author"], "Ada Lovelace");
    assert_eq!(
        env.json(&["verify"])["problems"].as_array().unwrap().len(),
        0
    );
}

#[test]
fn init_accepts_the_store_directory_itself() {
    let env = TestEnv::bare();
    let target = env.path("proj/.dsv");
    std::fs::create_dir_all(env.path("proj")).unwrap();
    env.ok(&["init", target.to_str().unwrap()]);
    assert!(env.path("proj/.dsv/catalog.db").exists());
    assert!(!env.path("proj/.dsv/.dsv").exists());
    env.write("data/a", "a");
    let out = env
        .dsv()
        .args(["commit", "data", "--dataset", "d"])
        .env("DSV_STORE", &target)
        .output()
        .unwrap();
    assert!(out.status.success());
}

#[test]
fn a_commit_after_status_stores_what_status_saw() {
    // status must not teach the stat cache about content the store does not hold.
    let env = TestEnv::new();
    env.write("ws/a.txt", "hello\n");
    env.ok(&["commit", "ws", "--dataset", "d"]);
    env.write("ws/a.txt", "changed\n");
    env.write("ws/b.txt", "new\n");
    settle(&env);
    env.ok(&["status", "ws"]);
    let commit = env.json(&["commit", "ws", "--dataset", "d"]);
    assert_eq!(commit["files_read"], 2, "{commit}");
    assert_eq!(
        env.json(&["verify"])["problems"].as_array().unwrap().len(),
        0
    );
    env.ok(&["checkout", "d", "out"]);
    assert_same_tree(&env.path("ws"), &env.path("out"));
}

#[test]
fn a_file_whose_bytes_equal_a_version_object_is_still_stored() {
    // Objects of different kinds may share an id (the same bytes); one must not hide the other.
    let env = TestEnv::new();
    env.write("ws/a.txt", "one");
    let version = env.json(&["commit", "ws", "--dataset", "d"])["version"]
        .as_str()
        .unwrap()
        .to_string();
    let store = dsv::Store::open(&env.path(".dsv")).unwrap();
    let encoded = store
        .reader()
        .version(&version.parse().unwrap())
        .unwrap()
        .encode();
    drop(store);
    env.write("other/v.txt", &encoded);
    env.ok(&["commit", "other", "--dataset", "other"]);
    env.ok(&["checkout", "other", "out"]);
    assert_same_tree(&env.path("other"), &env.path("out"));
}

#[test]
fn large_files_are_written_in_segments_and_round_trip() {
    let env = TestEnv::new();
    let mut big = pseudo_random(12_000_000, 3);
    big.extend(std::iter::repeat_n(0u8, 9_000_000));
    env.write("ws/big.bin", &big);
    env.write("ws/tool", pseudo_random(9_500_000, 4));
    make_executable(&env.path("ws/tool"));
    env.ok(&["commit", "ws", "--dataset", "d"]);
    let report = env.json(&["checkout", "d", "out"]);
    assert_eq!(report["written"], 2);
    assert_same_tree(&env.path("ws"), &env.path("out"));
    env.ok(&["status", "out", "--exit-code"]);
}

#[test]
fn untracked_entries_dsv_cannot_version_are_left_alone() {
    let env = TestEnv::new();
    env.write("ws/a.txt", "a");
    env.ok(&["commit", "ws", "--dataset", "d"]);
    env.ok(&["checkout", "d", "work"]);
    std::os::unix::fs::symlink("/etc/hostname", env.path("work/absolute")).unwrap();
    assert!(
        std::process::Command::new("mkfifo")
            .arg(env.path("work/fifo"))
            .status()
            .unwrap()
            .success()
    );
    env.ok(&["status", "work"]);
    env.ok(&["checkout", "d", "work"]);
    assert!(env.path("work/fifo").exists());
    // commit still refuses them, naming the entry.
    let error = env.json_error(&["commit", "work", "--dataset", "d"], 3);
    assert!(
        error["message"].as_str().unwrap().contains("absolute"),
        "{error}"
    );
}

#[test]
fn rerunning_a_tagged_commit_on_an_unchanged_directory_succeeds() {
    let env = TestEnv::new();
    env.write("ws/a", "a");
    settle(&env);
    let first = env.json(&["commit", "ws", "--dataset", "d", "--tag", "v1"]);
    let again = env.json(&["commit", "ws", "--dataset", "d", "--tag", "v1"]);
    assert_eq!(again["created"], false);
    assert_eq!(again["version"], first["version"]);
    env.write("ws/a", "changed");
    let error = env.json_error(&["commit", "ws", "--dataset", "d", "--tag", "v1"], 3);
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("already exists"),
        "{error}"
    );
    assert_eq!(
        env.json(&["log", "d"]).as_array().unwrap().len(),
        1,
        "nothing recorded"
    );
}
