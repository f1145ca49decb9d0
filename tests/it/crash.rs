//! Promise 1: kill -9 at any point of commit or checkout leaves the store consistent, and a
//! re-run finishes the job.

use std::time::Duration;

use crate::common::{TestEnv, assert_same_tree, kill_after, pseudo_random, wait_until};

/// About 48 MiB in 96 files, half incompressible, half compressible.
fn large_tree(env: &TestEnv) {
    for i in 0..96u64 {
        let mut bytes = pseudo_random(256 * 1024, i + 1);
        if i % 2 == 0 {
            bytes = bytes.iter().map(|b| b % 4).collect();
        }
        let bytes = bytes.repeat(2);
        env.write(&format!("data/part{}/file{i:03}.bin", i % 4), bytes);
    }
}

fn assert_consistent(env: &TestEnv) {
    let out = env.run(&["--json", "verify"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "verify after a kill: {report}");
    assert_eq!(report["problems"].as_array().unwrap().len(), 0);
}

#[test]
fn kill_during_commit_leaves_a_consistent_store_and_the_rerun_succeeds() {
    let env = TestEnv::new();
    large_tree(&env);
    // A slow commit (one thread, zstd level 19: seconds for this tree on any machine) is
    // killed at points spread over its first phases; a commit at normal speed is then killed
    // later on, where it may already be writing the catalog. Killed packs are never named by
    // the catalog, so every re-run starts again from the beginning.
    let slow = [
        "commit",
        "data",
        "--dataset",
        "big",
        "--jobs",
        "1",
        "--compression-level",
        "19",
    ];
    let normal = ["commit", "data", "--dataset", "big"];
    let mut killed_midway = 0;
    let kills: [(&[&str], u64); 6] = [
        (&slow, 30),
        (&slow, 120),
        (&slow, 300),
        (&slow, 700),
        (&normal, 150),
        (&normal, 400),
    ];
    for (round, (args, delay_ms)) in kills.into_iter().enumerate() {
        if kill_after(&env, args, Duration::from_millis(delay_ms)) {
            killed_midway += 1;
        }
        assert_consistent(&env);
        // Nothing half-done is visible: either no version, or a whole one.
        let log = env.run(&["--json", "log", "big"]);
        if log.status.success() {
            env.ok(&["checkout", "big", &format!("check{round}")]);
            assert_same_tree(&env.path("data"), &env.path(&format!("check{round}")));
        }
    }
    assert!(
        killed_midway >= 4,
        "the kills must land while the commit runs ({killed_midway} did)"
    );
    let report = env.json(&["commit", "data", "--dataset", "big", "--allow-empty"]);
    assert_eq!(report["created"], true);
    env.ok(&["checkout", "big", "out"]);
    assert_same_tree(&env.path("data"), &env.path("out"));
    assert_consistent(&env);
}

#[test]
fn kill_during_checkout_then_rerun_gives_the_exact_version() {
    let env = TestEnv::new();
    large_tree(&env);
    env.ok(&["commit", "data", "--dataset", "big"]);
    let mut killed_midway = 0;
    for delay_ms in [20u64, 60, 150] {
        let dir = format!("out{delay_ms}");
        // One thread keeps the checkout long enough for the kill to land on a fast machine.
        if kill_after(
            &env,
            &["checkout", "big", &dir, "--jobs", "1"],
            Duration::from_millis(delay_ms),
        ) {
            killed_midway += 1;
        }
        assert_consistent(&env);
        env.ok(&["checkout", "big", &dir]);
        assert_same_tree(&env.path("data"), &env.path(&dir));
        env.ok(&["status", &dir, "--exit-code"]);
    }
    assert!(
        killed_midway >= 1,
        "a kill must land while the checkout runs"
    );
}

#[test]
fn ctrl_c_during_commit_stops_cleanly_with_exit_130() {
    let env = TestEnv::new();
    large_tree(&env);
    let mut child = env.spawn(&[
        "commit",
        "data",
        "--dataset",
        "big",
        "--compression-level",
        "19",
        "--jobs",
        "1",
    ]);
    // Interrupted once the commit is under way: staging its first pack in the store's tmp.
    let tmp = env.path(".dsv/tmp");
    wait_until("the commit to stage a pack", || {
        std::fs::read_dir(&tmp).is_ok_and(|mut d| d.next().is_some())
            || child.try_wait().unwrap().is_some()
    });
    let interrupted = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(interrupted.success());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains("interrupted") && stderr.contains("run the command again"),
        "{stderr}"
    );
    assert!(
        env.run(&["log", "big"]).status.code() == Some(3),
        "no version was recorded"
    );
    assert_consistent(&env);
    assert!(
        std::fs::read_dir(env.path(".dsv/tmp"))
            .unwrap()
            .next()
            .is_none(),
        "no partial pack is left"
    );
    env.ok(&["commit", "data", "--dataset", "big", "--allow-empty"]);
    env.ok(&["checkout", "big", "out"]);
    assert_same_tree(&env.path("data"), &env.path("out"));
}
