//! Scale (issue 13): costs proportional to what changed. The figures at 100,000 to 3,000,000
//! files come from `scripts/bench-scale` (docs/scale.md); these tests pin the mechanisms.

use std::fs;

use crate::common::{TestEnv, pseudo_random};

/// A tree of `dirs` directories of `files` small files each, under `root`.
fn many_files(env: &TestEnv, root: &str, dirs: usize, files: usize) {
    for d in 0..dirs {
        for f in 0..files {
            env.write(&format!("{root}/d{d:02}/f{f:02}"), format!("{d}/{f}\n"));
        }
    }
}

#[test]
fn a_diff_reads_only_the_trees_on_the_changed_paths() {
    let env = TestEnv::new();
    many_files(&env, "data", 30, 5);
    env.write("data/a/b/c/deep.txt", "deep\n");
    env.ok(&["commit", "data", "-d", "ds"]);
    env.write("data/d07/f03", "edited\n");
    env.ok(&["commit", "data", "-d", "ds"]);
    let diff = env.json(&["diff", "ds"]);
    assert_eq!(diff["changes"].as_array().unwrap().len(), 1, "{diff}");
    assert_eq!(diff["changes"][0]["path"], "d07/f03");
    // The two roots and the two versions of d07: none of the other 33 trees.
    assert_eq!(diff["trees_read"], 4, "{diff}");

    env.write("data/a/b/c/deep.txt", "deeper\n");
    env.ok(&["commit", "data", "-d", "ds"]);
    let diff = env.json(&["diff", "ds"]);
    assert_eq!(diff["changes"][0]["path"], "a/b/c/deep.txt", "{diff}");
    // Roots, a, a/b and a/b/c, on each side.
    assert_eq!(diff["trees_read"], 8, "{diff}");

    // Identical versions: not even the roots are read.
    let ids = crate::common::version_ids(&env, "ds");
    let same = env.json(&["diff", &format!("ds@{}", &ids[0][..12]), "ds"]);
    assert_eq!(same["trees_read"], 0, "{same}");
}

#[test]
fn a_checkout_into_an_empty_directory_gives_the_exact_tree() {
    let env = TestEnv::new();
    many_files(&env, "data", 4, 3);
    env.write("data/x/y/z.bin", pseudo_random(100_000, 3));
    env.ok(&["commit", "data", "-d", "ds"]);
    // Directories are made before the files are staged beside their destinations.
    env.ok(&["checkout", "ds", "out"]);
    assert_eq!(
        crate::common::snapshot_tree(&env.path("out")),
        crate::common::snapshot_tree(&env.path("data"))
    );
    env.ok(&["audit", "out"]);
}

#[test]
fn a_failed_checkout_into_a_new_directory_removes_the_directories_it_made() {
    let env = TestEnv::new();
    env.write("data/keep/one.txt", "one\n");
    env.write("data/big/nested/big.bin", pseudo_random(3_000_000, 8));
    env.ok(&["commit", "data", "-d", "ds"]);
    // Corrupt every pack: staging meets bad data after the directories were made.
    for entry in fs::read_dir(env.path(".dsv/packs")).unwrap() {
        let path = entry.unwrap().path();
        let mut bytes = fs::read(&path).unwrap();
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0x55;
        fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
        fs::write(&path, bytes).unwrap();
    }
    fs::create_dir(env.path("out")).unwrap();
    env.write("out/untracked.txt", "mine\n");
    env.fails(&["checkout", "ds", "out"], 5);
    let left: Vec<String> = fs::read_dir(env.path("out"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(
        left,
        ["untracked.txt"],
        "only what was there before is left"
    );
}

/// The fields docs/cli.md lists for a JSON report (the first column of the table under the
/// `### NAME` heading).
fn documented_fields(name: &str) -> Vec<String> {
    let doc = fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/cli.md")).unwrap();
    let section = doc
        .split(&format!("\n### {name}\n"))
        .nth(1)
        .unwrap_or_else(|| panic!("docs/cli.md has no ### {name}"));
    let section = section.split("\n### ").next().unwrap();
    section
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split_once('`').map(|(field, _)| field.to_string()))
        .collect()
}

#[test]
fn the_documented_diff_report_is_the_one_printed() {
    let env = TestEnv::new();
    env.write("data/a.txt", "a\n");
    env.ok(&["commit", "data", "-d", "ds"]);
    let diff = env.json(&["diff", "ds"]);
    let mut printed: Vec<String> = diff.as_object().unwrap().keys().cloned().collect();
    let mut documented = documented_fields("DiffReport");
    printed.sort();
    documented.sort();
    assert_eq!(printed, documented);
}

#[test]
fn a_killed_checkouts_staged_subtree_is_never_committed_and_the_next_checkout_removes_it() {
    let env = TestEnv::new();
    many_files(&env, "data", 2, 2);
    env.ok(&["commit", "data", "-d", "ds"]);
    env.ok(&["checkout", "ds", "out"]);
    // What a checkout killed while staging a new subtree leaves: a directory under a
    // temporary name of a process that is gone (pid 999999999 never runs), and one of a
    // process that still runs (this test's), which may be staging right now.
    let dead = ".dsv-tmp-999999999-1";
    let live = format!(".dsv-tmp-{}-1", std::process::id());
    for leftover in [dead, live.as_str()] {
        env.write(&format!("out/{leftover}/d09/f00"), "half-written\n");
    }
    // Neither is part of the workspace: status is clean and a commit records nothing new.
    env.ok(&["status", "out", "--exit-code"]);
    let report = env.json(&["commit", "out", "-d", "ds"]);
    assert_eq!(report["created"], false, "{report}");
    // The next checkout removes the dead process's subtree whole and keeps the live one's.
    env.write("data/d00/f00", "changed\n");
    env.ok(&["commit", "data", "-d", "ds"]);
    env.ok(&["checkout", "ds", "out"]);
    assert!(!env.path(&format!("out/{dead}")).exists());
    assert!(env.path(&format!("out/{live}/d09/f00")).exists());
}
