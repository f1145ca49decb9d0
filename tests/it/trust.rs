//! Trust: sequences of user actions that once lost data or corrupted it silently (issue 9).
//! Each test is the reproduction from the review, and fails on the code before the fix.

use crate::common::{TestEnv, pseudo_random, settle};

fn problems(env: &TestEnv) -> Vec<serde_json::Value> {
    env.json(&["verify"])["problems"]
        .as_array()
        .unwrap()
        .clone()
}

fn version_ids(env: &TestEnv, dataset: &str) -> Vec<String> {
    env.json(&["log", dataset])
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["id"].as_str().unwrap().to_string())
        .collect()
}

/// Finding 1: a stat-cache entry must not vouch for a file id that gc freed.
#[test]
fn a_stat_cache_never_vouches_for_data_gc_freed() {
    let env = TestEnv::new();
    env.write("d/a.bin", pseudo_random(300_000, 1));
    env.write("d/small.txt", "hello\n");
    settle(); // so the stat cache trusts what the commit hashes
    env.ok(&["commit", "d", "-d", "ds"]);
    env.write("other/b.bin", pseudo_random(10_000, 2));
    env.ok(&["commit", "other", "-d", "ds"]);
    std::fs::rename(env.path("d"), env.path("away")).unwrap();
    let v1 = version_ids(&env, "ds")[1].clone();
    env.ok(&["rm", &format!("ds@{}", &v1[..12])]);
    env.ok(&["gc"]);
    std::fs::rename(env.path("away"), env.path("d")).unwrap();
    let report = env.json(&["commit", "d", "-d", "ds"]);
    // Both files had to be read again: the store no longer held them.
    assert_eq!(report["files_unchanged"], 0, "{report}");
    assert!(problems(&env).is_empty());
    env.ok(&["verify", "--full"]);
    env.ok(&["checkout", "ds", "back"]);
    assert_eq!(
        std::fs::read(env.path("back/a.bin")).unwrap(),
        pseudo_random(300_000, 1)
    );
}

/// Finding 3: content that only a removed version holds is not "recoverable", so checkout
/// does not overwrite an untracked file holding it (gc would delete the only copy).
#[test]
fn checkout_keeps_an_untracked_file_whose_content_only_a_removed_version_holds() {
    let env = TestEnv::new();
    let precious = pseudo_random(200_000, 7);
    env.write("src/precious.bin", &precious);
    env.ok(&["commit", "src", "-d", "old"]);
    std::fs::remove_dir_all(env.path("src")).unwrap();
    env.ok(&["rm", "old", "--force"]);
    // The dataset that will be checked out has a different file at the same path.
    env.write("new/precious.bin", pseudo_random(1_000, 8));
    env.ok(&["commit", "new", "-d", "fresh"]);
    // The user's untracked copy of the content only the removed version holds.
    env.write("out/precious.bin", &precious);
    let error = env.json_error(&["checkout", "fresh", "out"], 4);
    assert!(
        error["message"].as_str().unwrap().contains("precious.bin")
            || error.to_string().contains("precious.bin"),
        "{error}"
    );
    assert_eq!(
        std::fs::read(env.path("out/precious.bin")).unwrap(),
        precious
    );
    // Content a live version holds is still recoverable: no false conflict.
    env.write("out2/precious.bin", pseudo_random(1_000, 8));
    env.ok(&["checkout", "fresh", "out2"]);
}
