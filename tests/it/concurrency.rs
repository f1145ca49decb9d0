//! Promise 5: processes on one machine (one per GPU) share one store safely.

use std::process::Child;

use crate::common::{TestEnv, assert_same_tree, pseudo_random};

fn wait_ok(child: Child) -> String {
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn concurrent_commits_all_land_and_share_chunks() {
    let env = TestEnv::new();
    let shared = pseudo_random(2_000_000, 42);
    for i in 0..4 {
        env.write(&format!("d{i}/shared.bin"), &shared);
        env.write(&format!("d{i}/own.txt"), format!("worker {i}\n"));
    }
    // Four datasets at once, and two commits racing on one dataset.
    let mut children: Vec<Child> = (0..4)
        .map(|i| env.spawn(&["commit", &format!("d{i}"), "--dataset", &format!("set{i}")]))
        .collect();
    children.push(env.spawn(&["commit", "d0", "--dataset", "same", "-m", "a"]));
    children.push(env.spawn(&["commit", "d1", "--dataset", "same", "-m", "b"]));
    for child in children {
        wait_ok(child);
    }
    let datasets = env.json(&["ls"]);
    assert_eq!(datasets.as_array().unwrap().len(), 5);
    // Both racing commits are in the history, one the parent of the other.
    let log = env.json(&["log", "same"]);
    assert_eq!(log.as_array().unwrap().len(), 2);
    assert_eq!(log[0]["parent"], log[1]["id"]);
    let verify = env.json(&["verify"]);
    assert_eq!(verify["problems"].as_array().unwrap().len(), 0);
    for i in 0..4 {
        env.ok(&["checkout", &format!("set{i}"), &format!("out{i}")]);
        assert_same_tree(&env.path(&format!("d{i}")), &env.path(&format!("out{i}")));
    }
}

#[test]
fn concurrent_checkouts_of_one_version_do_not_tear_files() {
    let env = TestEnv::new();
    for i in 0..40 {
        env.write(&format!("data/f{i}.bin"), pseudo_random(100_000, i));
    }
    env.ok(&["commit", "data", "--dataset", "d"]);
    // Four ranks into their own directories, and three into one shared directory.
    let mut children: Vec<Child> = (0..4)
        .map(|i| env.spawn(&["checkout", "d", &format!("rank{i}")]))
        .collect();
    children.extend((0..3).map(|_| env.spawn(&["checkout", "d", "shared"])));
    for child in children {
        wait_ok(child);
    }
    for dir in ["rank0", "rank1", "rank2", "rank3", "shared"] {
        assert_same_tree(&env.path("data"), &env.path(dir));
    }
    env.ok(&["status", "shared", "--exit-code"]);
}
