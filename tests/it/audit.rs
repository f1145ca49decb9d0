//! Reproducibility audits and lock files: `audit`, `lock`, `checkout --lock`,
//! `audit --lock`, `verify --full`.

use crate::common::{TestEnv, assert_same_tree, make_executable, pseudo_random, settle};

fn mismatches(report: &serde_json::Value) -> Vec<(String, String)> {
    report["mismatches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["path"].as_str().unwrap().to_string(),
                m["change"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn audit_passes_an_exact_checkout_and_lists_every_difference_with_hashes() {
    let env = TestEnv::new();
    env.write("data/a.txt", "alpha\n");
    env.write("data/sub/b.bin", pseudo_random(300_000, 3));
    env.write("data/c.txt", "gamma\n");
    env.ok(&["commit", "data", "-d", "ds", "-t", "v1"]);
    env.ok(&["checkout", "ds", "out"]);
    settle(&env);
    let clean = env.json(&["audit", "out"]);
    assert_eq!(clean["identical"], true, "{clean}");
    assert_eq!(clean["claimed_by"], "workspace");
    assert_eq!(clean["files"], 3);
    assert!(clean["dsv_version"].is_string() && clean["audited_at"].is_i64());
    // The stat cache vouched for every file: nothing was read.
    assert_eq!(clean["files_hashed"], 0, "{clean}");
    let full = env.json(&["audit", "out", "--full"]);
    assert_eq!(full["identical"], true);
    assert_eq!(full["files_hashed"], 3, "{full}");

    env.write("out/a.txt", "alpha, edited\n");
    std::fs::remove_file(env.path("out/c.txt")).unwrap();
    env.write("out/extra.txt", "not in the version\n");
    make_executable(&env.path("out/sub/b.bin"));
    let out = env.run(&["--json", "audit", "out"]);
    assert_eq!(out.status.code(), Some(1));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["identical"], false);
    assert_eq!(
        mismatches(&report),
        [
            ("a.txt".to_string(), "modified".to_string()),
            ("c.txt".to_string(), "deleted".to_string()),
            ("extra.txt".to_string(), "added".to_string()),
            ("sub/b.bin".to_string(), "modified".to_string()),
        ]
    );
    let a = &report["mismatches"][0];
    let committed = env.json(&["ls", "ds@v1"]);
    let a_id = committed
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["path"] == "a.txt")
        .unwrap()["id"]
        .clone();
    assert_eq!(a["expected"], a_id);
    assert_eq!(a["actual_size"], 14);
    assert_ne!(a["actual"], a["expected"]);
    // Auditing never changes the store's record of the directory.
    let status = env.json(&["status", "out"]);
    assert_eq!(status["changes"].as_array().unwrap().len(), 4);

    // --against another version.
    env.write("data/a.txt", "alpha v2\n");
    env.ok(&["commit", "data", "-d", "ds"]);
    let data_vs_v1 = env.run(&["--json", "audit", "data", "--against", "ds@v1"]);
    assert_eq!(data_vs_v1.status.code(), Some(1));
    let report: serde_json::Value = serde_json::from_slice(&data_vs_v1.stdout).unwrap();
    assert_eq!(report["claimed_by"], "revision");
    assert_eq!(
        mismatches(&report),
        [("a.txt".to_string(), "modified".to_string())]
    );
    env.fails(&["audit", "nowhere"], 3);
    std::fs::create_dir(env.path("fresh")).unwrap();
    env.fails(&["audit", "fresh"], 3);
}

#[test]
fn a_lock_file_rebuilds_and_audits_exactly_the_pinned_versions() {
    let env = TestEnv::new();
    env.write("images/0.png", pseudo_random(50_000, 1));
    env.write("images/1.png", pseudo_random(50_000, 3));
    env.write("labels/train.csv", "0,1\n1,7\n");
    env.ok(&["commit", "images", "-d", "images", "-t", "v1"]);
    env.ok(&["commit", "labels", "-d", "labels"]);
    let lock = env.ok(&["lock", "images@v1", "labels"]);
    std::fs::write(env.path("dsv.lock"), &lock).unwrap();
    let parsed: serde_json::Value = serde_json::from_str(&lock).unwrap();
    assert_eq!(parsed["dsv_lock"], 1);
    assert_eq!(parsed["datasets"]["labels"]["files"], 1);
    // Keep the pinned sources, then move both heads on.
    let pinned_images = env.path("pinned/images");
    let pinned_labels = env.path("pinned/labels");
    env.ok(&["checkout", "images@v1", pinned_images.to_str().unwrap()]);
    env.ok(&["checkout", "labels", pinned_labels.to_str().unwrap()]);
    env.write("images/2.png", pseudo_random(50_000, 5));
    env.write("labels/train.csv", "0,1\n1,7\n2,2\n");
    env.ok(&["commit", "images", "-d", "images"]);
    env.ok(&["commit", "labels", "-d", "labels"]);

    let checked = env.json(&["checkout", "--lock", "dsv.lock", "run"]);
    assert_eq!(checked["datasets"].as_array().unwrap().len(), 2);
    assert_same_tree(&pinned_images, &env.path("run/images"));
    assert_same_tree(&pinned_labels, &env.path("run/labels"));
    settle(&env);
    let audit = env.json(&["audit", "--lock", "dsv.lock", "run"]);
    assert_eq!(audit["identical"], true, "{audit}");

    env.write("run/labels/train.csv", "tampered\n");
    let out = env.run(&["--json", "audit", "--lock", "dsv.lock", "run"]);
    assert_eq!(out.status.code(), Some(1));
    let audit: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(audit["identical"], false);
    assert_eq!(audit["datasets"][0]["identical"], true);
    assert_eq!(audit["datasets"][1]["identical"], false);
}

#[test]
fn bad_lock_files_are_refused_before_anything_is_written() {
    let env = TestEnv::new();
    env.write("data/a.txt", "a\n");
    env.ok(&["commit", "data", "-d", "ds"]);
    let lock = env.ok(&["lock", "ds"]);
    let unknown = lock.replace(
        &env.json(&["log", "ds"])[0]["id"]
            .as_str()
            .unwrap()
            .to_string(),
        &"ab".repeat(32),
    );
    std::fs::write(env.path("unknown.lock"), unknown).unwrap();
    let error = env.json_error(&["checkout", "--lock", "unknown.lock", "run"], 3);
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("which this store does not have"),
        "{error}"
    );
    assert!(!env.path("run").exists(), "nothing was written");
    std::fs::write(env.path("garbage.lock"), "not json").unwrap();
    env.fails(&["checkout", "--lock", "garbage.lock", "run"], 3);
    std::fs::write(
        env.path("future.lock"),
        lock.replace("\"dsv_lock\": 1", "\"dsv_lock\": 2"),
    )
    .unwrap();
    let error = env.json_error(&["audit", "--lock", "future.lock", "."], 3);
    assert!(error["message"].as_str().unwrap().contains("lock format 2"));
    env.fails(&["checkout", "--lock", "missing.lock", "run"], 6);
    env.fails(&["lock", "ds", "ds"], 3);
    env.fails(&["checkout", "--lock", "garbage.lock", "ds", "run"], 2);
}

#[test]
fn a_lock_fetches_its_versions_from_the_remote_it_names() {
    let remote_home = TestEnv::bare();
    let maker = TestEnv::new();
    let url = format!("file://{}/remote", remote_home.root().display());
    maker.write("data/a.bin", pseudo_random(200_000, 9));
    maker.ok(&["commit", "data", "-d", "ds"]);
    maker.ok(&["remote", "add", "team", &url]);
    maker.ok(&["push"]);
    let lock = maker.ok(&["lock", "ds"]);
    let parsed: serde_json::Value = serde_json::from_str(&lock).unwrap();
    assert_eq!(parsed["datasets"]["ds"]["remotes"][0]["url"], url.as_str());

    // A training machine: its own store, the same bucket under another remote name.
    let trainer = TestEnv::new();
    trainer.ok(&["remote", "add", "origin", &url]);
    std::fs::write(trainer.path("dsv.lock"), &lock).unwrap();
    trainer.ok(&["checkout", "--lock", "dsv.lock", "run"]);
    assert_same_tree(&maker.path("data"), &trainer.path("run/ds"));
    trainer.ok(&["audit", "--lock", "dsv.lock", "run"]);

    // Without a remote the lock names, the error says which one to add.
    let stranger = TestEnv::new();
    std::fs::write(stranger.path("dsv.lock"), &lock).unwrap();
    let error = stranger.json_error(&["checkout", "--lock", "dsv.lock", "run"], 3);
    assert!(
        error["hints"][0].as_str().unwrap().contains(&url),
        "{error}"
    );
}

#[test]
fn verify_full_reassembles_every_file() {
    let env = TestEnv::new();
    env.write("data/big.bin", pseudo_random(1_000_000, 1));
    env.write("data/small.txt", "small\n");
    env.write("data/copy.txt", "small\n");
    env.ok(&["commit", "data", "-d", "ds"]);
    let quick = env.json(&["verify"]);
    assert_eq!(quick["files_rehashed"], 0);
    let full = env.json(&["verify", "--full"]);
    assert_eq!(full["problems"].as_array().unwrap().len(), 0, "{full}");
    // Two distinct file contents (the copy deduplicates).
    assert_eq!(full["files_rehashed"], 2, "{full}");
    assert_eq!(full["bytes_rehashed"], 1_000_006);
}
