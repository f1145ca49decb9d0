//! Findings of the third trust review (issue 23) that are not about checkout: a rename read as
//! corruption, answers lost in a pipe, ignore files half read, and outside input trusted.

use crate::common::{TestEnv, push_to_file_remote};

/// The datasets a store lists, with their version counts.
fn datasets(env: &TestEnv, store: &str) -> Vec<(String, u64)> {
    env.json(&["--store", store, "ls"])
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["name"].as_str().unwrap().to_string(),
                d["versions"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn a_renamed_dataset_keeps_its_versions_in_verify_show_a_clone_a_repair_and_the_reader() {
    let env = TestEnv::new();
    env.write("data/a.txt", "a");
    env.ok(&["commit", "data", "-d", "x", "-m", "one"]);
    env.write("data/b.txt", "b");
    env.ok(&["commit", "data", "-d", "x", "-m", "two"]);
    env.ok(&["tag", "x", "v1"]);
    env.ok(&["rename", "x", "y"]);
    env.ok(&["verify"]);
    assert_eq!(env.json(&["show", "y"])["dataset"], "y");
    env.ok(&["show", "y@v1"]);
    env.ok(&["show", "y@latest~1"]);
    assert_eq!(datasets(&env, ".dsv"), [("y".to_string(), 2)]);
    let engine =
        dsv::read::ReadEngine::open(&env.path(".dsv"), dsv::read::ReadOptions::default()).unwrap();
    assert_eq!(engine.version("y@v1").unwrap().dataset(), "y");
    drop(engine);

    // A clone sees y with every version, and checks it out as y.
    let (_, url) = push_to_file_remote(&env, "remote", "y");
    env.ok(&["clone", &url, "c"]);
    assert_eq!(datasets(&env, "c"), [("y".to_string(), 2)]);
    env.ok(&["--store", "c", "verify"]);
    let out = env
        .dsv()
        .args(["--store", "c", "checkout", "y", "out"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("Checked out y@"), "{said}");
    assert_eq!(
        env.json(&["--store", "c", "log", "y"])
            .as_array()
            .unwrap()
            .len(),
        2
    );

    // A repair rebuilds y with every version from the packs and the ref log.
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(env.path(&format!(".dsv/catalog.db{suffix}")));
    }
    env.ok(&["repair"]);
    assert_eq!(datasets(&env, ".dsv"), [("y".to_string(), 2)]);
    env.ok(&["verify"]);
    env.ok(&["show", "y@v1"]);
}
