//! Cleanup: `rm`, `pin`/`unpin`/`pins`, `gc` (plan, execute, kill -9, concurrent commits).

use std::time::Duration;

use crate::common::{
    TestEnv, assert_same_tree, kill_after, pseudo_random, settle, version_ids, wait_until,
};

fn pack_bytes(env: &TestEnv) -> u64 {
    std::fs::read_dir(env.path(".dsv/packs"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

fn assert_consistent(env: &TestEnv) {
    let report = env.json(&["verify"]);
    assert_eq!(report["problems"].as_array().unwrap().len(), 0, "{report}");
}

#[test]
fn rm_then_gc_frees_exactly_the_data_no_version_reaches() {
    let env = TestEnv::new();
    // Three versions, each with 2 MB of its own and a file they all share.
    env.write("data/shared.bin", pseudo_random(500_000, 1));
    for round in 0..3u64 {
        env.write("data/own.bin", pseudo_random(2_000_000, 11 + 2 * round));
        env.ok(&["commit", "data", "-d", "ds"]);
        let keep = env.path(&format!("kept{round}"));
        env.ok(&["checkout", "ds", keep.to_str().unwrap()]);
        std::fs::remove_dir_all(&keep).unwrap();
    }
    let ids = version_ids(&env, "ds"); // newest first
    env.ok(&["checkout", &format!("ds@{}", &ids[2][..12]), "v1"]);
    env.ok(&["checkout", &format!("ds@{}", &ids[0][..12]), "v3"]);

    // Nothing to collect yet.
    let plan = env.json(&["gc", "--dry-run"]);
    assert_eq!(plan["bytes_freed"], 0, "{plan}");
    let middle = format!("ds@{}", &ids[1][..12]);
    let removed = env.json(&["rm", &middle]);
    assert_eq!(removed["removed"].as_array().unwrap().len(), 1);

    let before = pack_bytes(&env);
    let plan = env.json(&["gc", "--dry-run"]);
    assert_eq!(plan["dry_run"], true);
    let freed = plan["bytes_freed"].as_i64().unwrap();
    assert!(freed > 1_900_000 && freed < 2_200_000, "{plan}");
    assert_eq!(pack_bytes(&env), before, "a dry run deletes nothing");

    let done = env.json(&["gc"]);
    assert_eq!(done["dry_run"], false);
    let after = pack_bytes(&env);
    assert!(
        before - after > 1_900_000 && before - after < 2_200_000,
        "{before} -> {after}: {done}"
    );
    assert_consistent(&env);
    // The remaining versions are whole; the removed one is refused, and the log marks it.
    env.ok(&["checkout", &format!("ds@{}", &ids[2][..12]), "again1"]);
    assert_same_tree(&env.path("v1"), &env.path("again1"));
    env.ok(&["checkout", "ds", "again3"]);
    assert_same_tree(&env.path("v3"), &env.path("again3"));
    let error = env.json_error(&["checkout", &middle, "gone"], 3);
    assert!(error["message"].as_str().unwrap().contains("was removed"));
    let log = env.json(&["log", "ds"]);
    assert!(log[1]["removed_at"].is_i64(), "{log}");
    assert!(log[0]["removed_at"].is_null());
    // A second gc finds nothing more.
    let again = env.json(&["gc"]);
    assert_eq!(again["bytes_freed"], 0, "{again}");
}

#[test]
fn pins_workspaces_heads_and_tags_keep_versions() {
    let env = TestEnv::new();
    env.write("data/a.txt", "one\n");
    env.ok(&["commit", "data", "-d", "ds", "-t", "v1"]);
    env.write("data/a.txt", "two\n");
    env.ok(&["commit", "data", "-d", "ds"]);
    env.write("data/a.txt", "three\n");
    env.ok(&["commit", "data", "-d", "ds"]);
    let ids = version_ids(&env, "ds");
    let second = format!("ds@{}", &ids[1][..12]);

    let pin = env.json(&["pin", &second, "--reason", "training run 42"]);
    assert_eq!(pin["reason"], "training run 42");
    let error = env.json_error(&["rm", &second], 3);
    assert!(
        error["message"].as_str().unwrap().contains("pinned"),
        "{error}"
    );
    let pins = env.json(&["pins"]);
    assert_eq!(pins.as_array().unwrap().len(), 1);
    env.ok(&["unpin", &second]);
    env.fails(&["unpin", &second], 3);
    // A lease that has lapsed no longer holds.
    env.ok(&["pin", &second, "--until", "2020-01-01T00:00:00Z"]);
    // A directory holding the version keeps it while the directory exists.
    env.ok(&["checkout", &second, "job"]);
    let error = env.json_error(&["rm", &second], 3);
    assert!(
        error["message"].as_str().unwrap().contains("job"),
        "{error}"
    );
    std::fs::remove_dir_all(env.path("job")).unwrap();
    env.ok(&["rm", &second]);

    // The head goes only with the whole dataset; a tagged version only with --force.
    let error = env.json_error(&["rm", "ds@latest"], 3);
    assert!(
        error["message"].as_str().unwrap().contains("head"),
        "{error}"
    );
    env.ok(&["pin", "ds@v1", "--until", "7d"]);
    // (data/ holds the head: it goes first.)
    std::fs::remove_dir_all(env.path("data")).unwrap();
    let error = env.json_error(&["rm", "ds"], 3);
    assert!(
        error["message"].as_str().unwrap().contains("pinned"),
        "{error}"
    );
    env.ok(&["unpin", "ds@v1"]);
    let error = env.json_error(&["rm", "ds"], 3);
    assert!(
        error["message"].as_str().unwrap().contains("tagged v1"),
        "{error}"
    );
    let removed = env.json(&["rm", "ds", "--force"]);
    assert_eq!(removed["tags_dropped"], serde_json::json!(["v1"]));
    env.ok(&["gc", "--grace", "0s"]);
    assert_consistent(&env);
    env.fails(&["checkout", "ds", "out"], 3);
    // The dataset can start again.
    env.write("fresh/b.txt", "b\n");
    env.ok(&["commit", "fresh", "-d", "ds"]);
    env.ok(&["checkout", "ds", "out"]);
}

/// 24 MB in 24 files, then a version keeping half of them: removing the first leaves its
/// pack half garbage, so gc repacks 12 MB.
fn half_dead_pack(env: &TestEnv) -> Vec<String> {
    for i in 0..24u64 {
        env.write(
            &format!("data/f{i:02}.bin"),
            pseudo_random(1_000_000, 2 * i + 1),
        );
    }
    env.ok(&["commit", "data", "-d", "ds"]);
    for i in (0..24u64).step_by(2) {
        std::fs::remove_file(env.path(&format!("data/f{i:02}.bin"))).unwrap();
    }
    env.ok(&["commit", "data", "-d", "ds"]);
    let ids = version_ids(env, "ds");
    env.ok(&["rm", &format!("ds@{}", &ids[1][..12])]);
    ids
}

/// Compressible rows (digits of a pseudo-random sequence): a pack holds far fewer bytes
/// than the objects' raw size, as with CSV or JSON data.
fn rows(len: usize, seed: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 32);
    let mut x = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    let mut row = 0u64;
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(format!("{row},{},{}\n", x % 1000, (x >> 20) % 97).as_bytes());
        row += 1;
    }
    out
}

#[test]
fn gc_dry_run_states_exactly_what_gc_then_frees() {
    let env = TestEnv::new();
    // A pack half garbage and one all garbage but its version object (both repacked), and a
    // leftover file (deleted with --grace 0s), on compressible data, where raw and stored
    // sizes differ most (the live objects' raw size exceeds the pack's).
    for i in 0..16u64 {
        env.write(&format!("data/f{i:02}.csv"), rows(150_000, i + 1));
    }
    env.ok(&["commit", "data", "-d", "ds"]);
    for i in (0..16u64).step_by(2) {
        std::fs::remove_file(env.path(&format!("data/f{i:02}.csv"))).unwrap();
    }
    env.ok(&["commit", "data", "-d", "ds"]);
    let ids = version_ids(&env, "ds");
    env.ok(&["rm", &format!("ds@{}", &ids[1][..12])]);
    env.write("other/g.csv", rows(300_000, 99));
    env.ok(&["commit", "other", "-d", "gone"]);
    env.ok(&["workspace", "forget", "other"]);
    env.ok(&["rm", "gone"]);
    env.write(".dsv/packs/pack-1-left.tmp", vec![7u8; 4096]);
    settle(&env);

    let before = pack_bytes(&env);
    let plan = env.json(&["gc", "--dry-run", "--grace", "0s"]);
    assert_eq!(pack_bytes(&env), before, "a dry run deletes nothing");
    let done = env.json(&["gc", "--grace", "0s"]);
    let after = pack_bytes(&env);
    assert_eq!(plan["dry_run"], true);
    assert_eq!(done["dry_run"], false);
    assert_eq!(plan["repack"].as_array().unwrap().len(), 2, "{plan}");
    assert_eq!(plan["pack_files_deleted"], 3, "{plan}");
    for key in ["delete", "repack", "orphans"] {
        assert_eq!(plan[key], done[key], "{key}");
    }
    for key in ["bytes_freed", "pack_files_deleted", "packs_written"] {
        assert_eq!(plan[key], done[key], "{key}: {plan}\n{done}");
    }
    assert_eq!(
        done["bytes_freed"].as_i64().unwrap(),
        before as i64 - after as i64,
        "the bytes stated are the bytes freed on disk"
    );
    assert!(done["bytes_freed"].as_i64().unwrap() > 0, "{done}");
    assert_consistent(&env);
    env.ok(&["checkout", "ds", "out"]);
    assert_same_tree(&env.path("data"), &env.path("out"));
}

#[test]
fn kill_during_gc_loses_nothing_and_the_rerun_finishes() {
    let env = TestEnv::new();
    half_dead_pack(&env);
    settle(&env);
    let mut landed = 0;
    for delay in [5u64, 30, 80, 150, 300] {
        if kill_after(&env, &["gc", "--grace", "0s"], Duration::from_millis(delay)) {
            landed += 1;
        }
        assert_consistent(&env);
        env.ok(&["checkout", "ds", &format!("out{delay}")]);
        assert_same_tree(&env.path("data"), &env.path(&format!("out{delay}")));
        std::fs::remove_dir_all(env.path(&format!("out{delay}"))).unwrap();
        // Put garbage back for the next round when a gc completed.
        let plan = env.json(&["gc", "--dry-run", "--grace", "0s"]);
        if plan["bytes_freed"] == 0 {
            break;
        }
    }
    assert!(landed >= 1, "no kill landed while gc ran");
    let finished = env.json(&["gc", "--grace", "0s"]);
    assert_eq!(finished["dry_run"], false);
    let report = env.json(&["verify"]);
    assert_eq!(report["problems"].as_array().unwrap().len(), 0, "{report}");
    assert_eq!(
        report["unreferenced_packs"].as_array().unwrap().len(),
        0,
        "the rerun removed what the kills left: {report}"
    );
    env.ok(&["checkout", "ds", "final"]);
    assert_same_tree(&env.path("data"), &env.path("final"));
}

#[test]
fn commits_running_with_gc_lose_nothing() {
    let env = TestEnv::new();
    half_dead_pack(&env);
    // Commits of data that shares chunks with what gc is collecting, while gc runs.
    for i in 0..6u64 {
        env.write(
            &format!("other/f{i}.bin"),
            pseudo_random(1_000_000, 2 * (2 * i) + 1),
        );
    }
    let gc = env.spawn(&["gc", "--grace", "0s"]);
    let commit = env.spawn(&["commit", "other", "-d", "other"]);
    let gc_out = gc.wait_with_output().unwrap();
    let commit_out = commit.wait_with_output().unwrap();
    assert!(gc_out.status.success(), "{gc_out:?}");
    assert!(commit_out.status.success(), "{commit_out:?}");
    assert_consistent(&env);
    env.ok(&["gc", "--grace", "0s"]);
    assert_consistent(&env);
    env.ok(&["checkout", "other", "out"]);
    assert_same_tree(&env.path("other"), &env.path("out"));
    env.ok(&["checkout", "ds", "out2"]);
    assert_same_tree(&env.path("data"), &env.path("out2"));
}

fn actions(report: &serde_json::Value) -> Vec<(String, String)> {
    report["actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["version"].as_str().unwrap()[..12].to_string(),
                a["action"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn cache_prune_evicts_only_what_a_remote_holds_and_checkout_fetches_it_back() {
    let remote_home = TestEnv::bare();
    let env = TestEnv::new();
    env.write("data/shared.txt", "shared\n");
    let mut kept = Vec::new();
    for round in 0..3u64 {
        env.write("data/own.bin", pseudo_random(1_000_000, 31 + 2 * round));
        env.ok(&["commit", "data", "-d", "ds"]);
        let copy = env.path(&format!("copy{round}"));
        env.ok(&["checkout", "ds", copy.to_str().unwrap()]);
        kept.push(copy);
    }
    // The copies are outside dsv's knowledge once moved: keep them as plain references.
    for (i, copy) in kept.iter().enumerate() {
        std::fs::rename(copy, env.path(&format!("ref{i}"))).unwrap();
    }
    std::fs::remove_dir_all(env.path("data")).unwrap();
    let ids = version_ids(&env, "ds"); // newest first
    let short = |i: usize| ids[i][..12].to_string();

    let listed = env.json(&["cache", "ls"]);
    assert_eq!(listed.as_array().unwrap().len(), 3);
    for v in listed.as_array().unwrap() {
        assert!(v["unique_bytes"].as_u64().unwrap() >= 1_000_000, "{listed}");
        assert_eq!(v["shared_bytes"], 7, "{listed}");
        assert_eq!(v["on_remotes"], serde_json::json!([]));
    }

    // Nothing is on a remote: nothing is evicted, nothing deleted.
    let before = pack_bytes(&env);
    let refused = env.json(&["cache", "prune"]);
    assert_eq!(
        actions(&refused),
        [(short(2), "skipped".into()), (short(1), "skipped".into())],
        "{refused}"
    );
    assert_eq!(pack_bytes(&env), before);

    let url = format!("file://{}/remote", remote_home.root().display());
    env.ok(&["remote", "add", "origin", &url]);
    env.ok(&["push"]);
    env.ok(&["pin", &format!("ds@{}", short(1)), "--reason", "paper"]);
    let plan = env.json(&["cache", "prune", "--dry-run"]);
    assert_eq!(
        actions(&plan),
        [(short(2), "evicted".into()), (short(1), "skipped".into())],
        "least recently used first; the pinned one stays: {plan}"
    );
    assert_eq!(pack_bytes(&env), before, "a dry run changes nothing");
    let pruned = env.json(&["cache", "prune"]);
    assert_eq!(actions(&pruned), actions(&plan));
    let after = pack_bytes(&env);
    assert!(before - after > 950_000, "{before} -> {after}: {pruned}");
    let listed = env.json(&["cache", "ls"]);
    let oldest = &listed.as_array().unwrap()[2];
    assert_eq!(oldest["evicted"], true, "{listed}");
    assert_eq!(oldest["unique_bytes"], 0);
    let report = env.json(&["verify"]);
    assert_eq!(report["problems"].as_array().unwrap().len(), 0, "{report}");
    assert_eq!(report["files_on_remotes"], 1, "{report}");

    // A checkout of the evicted version fetches its chunks back, in a later second than
    // every use so far, so that its last use is the most recent (times are kept in whole
    // seconds): the clock is waited for until it has passed the latest recorded use.
    let latest = env
        .json(&["cache", "ls"])
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["last_used"].as_i64().unwrap())
        .max()
        .unwrap();
    wait_until("the clock to pass the latest use", || {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        now.unwrap().as_secs() as i64 > latest
    });
    env.ok(&["checkout", &format!("ds@{}", short(2)), "back"]);
    assert_same_tree(&env.path("ref0"), &env.path("back"));

    // --max-size evicts least recently used first until the store fits.
    env.ok(&["unpin", &format!("ds@{}", short(1))]);
    std::fs::remove_dir_all(env.path("back")).unwrap();
    let fit = env.json(&["cache", "prune", "--keep-last", "0", "--max-size", "2.5MB"]);
    assert_eq!(
        actions(&fit),
        [(short(1), "evicted".into())],
        "the oldest in use is now the one just checked out: {fit}"
    );

    // A dataset no remote holds: only --allow-data-loss removes, and the log says so.
    env.write("local/a.bin", pseudo_random(500_000, 91));
    env.ok(&["commit", "local", "-d", "solo"]);
    env.write("local/a.bin", pseudo_random(500_000, 93));
    env.ok(&["commit", "local", "-d", "solo"]);
    let skipped = env.json(&["cache", "prune", "--dataset", "solo"]);
    assert_eq!(actions(&skipped)[0].1, "skipped");
    let lost = env.json(&["cache", "prune", "--dataset", "solo", "--allow-data-loss"]);
    assert_eq!(actions(&lost)[0].1, "removed", "{lost}");
    let log = env.json(&["log", "solo"]);
    assert!(log[1]["removed_at"].is_i64(), "{log}");
    // Even with --keep-last 0, a head no remote holds is never removed by a prune.
    let head = env.json(&[
        "cache",
        "prune",
        "--dataset",
        "solo",
        "--allow-data-loss",
        "--keep-last",
        "0",
    ]);
    assert_eq!(actions(&head)[0].1, "skipped", "{head}");
    env.ok(&["checkout", "solo", "solo-out"]);
    settle(&env);
    let report = env.json(&["verify"]);
    assert_eq!(report["problems"].as_array().unwrap().len(), 0, "{report}");
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    for entry in walkdir::WalkDir::new(from) {
        let entry = entry.unwrap();
        let target = to.join(entry.path().strip_prefix(from).unwrap());
        if entry.file_type().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

#[test]
fn a_rerun_after_a_gc_killed_before_its_catalog_swap_keeps_the_repacked_data() {
    // The state a gc killed between sealing its new pack and naming it leaves: the old
    // catalog and packs, plus the new pack file, unnamed. The rerun writes a byte-identical
    // pack (same id) and must not then delete it as a leftover.
    let env = TestEnv::new();
    half_dead_pack(&env);
    copy_dir(&env.path(".dsv"), &env.path("before"));
    let done = env.json(&["gc", "--grace", "0s"]);
    assert_eq!(done["packs_written"], 1, "{done}");
    let new_packs: Vec<std::path::PathBuf> = std::fs::read_dir(env.path(".dsv/packs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            !env.path("before/packs")
                .join(p.file_name().unwrap())
                .exists()
        })
        .collect();
    assert_eq!(new_packs.len(), 1);
    let new_pack = std::fs::read(&new_packs[0]).unwrap();
    std::fs::remove_dir_all(env.path(".dsv")).unwrap();
    copy_dir(&env.path("before"), &env.path(".dsv"));
    std::fs::write(
        env.path(".dsv/packs")
            .join(new_packs[0].file_name().unwrap()),
        new_pack,
    )
    .unwrap();
    let report = env.json(&["verify"]);
    assert_eq!(report["unreferenced_packs"].as_array().unwrap().len(), 1);

    env.ok(&["gc", "--grace", "0s"]);
    assert_consistent(&env);
    env.ok(&["checkout", "ds", "out"]);
    assert_same_tree(&env.path("data"), &env.path("out"));
}

#[test]
fn catalog_rows_pointing_at_nothing_are_reported() {
    let env = TestEnv::new();
    env.write("data/a.txt", "a\n");
    env.ok(&["commit", "data", "-d", "ds"]);
    // A head naming a version the catalog does not have, and an object row whose frame is
    // gone: written behind dsv's back, as a damaged or hand-edited catalog would be.
    let catalog = rusqlite::Connection::open(env.path(".dsv/catalog.db")).unwrap();
    catalog
        .execute_batch(
            "PRAGMA foreign_keys = OFF;
             INSERT INTO datasets (name, head, created_at) VALUES ('ghost', zeroblob(32), 0);
             INSERT INTO objects (id, kind, frame, offset, length) VALUES (randomblob(32), 1, 999999, 0, 10);",
        )
        .unwrap();
    drop(catalog);
    let out = env.run(&["--json", "verify"]);
    assert_eq!(out.status.code(), Some(5));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let problems = report["problems"].to_string();
    assert!(problems.contains("ghost"), "{report}");
    assert!(
        problems.contains("a row of objects") && problems.contains("missing row of frames"),
        "{report}"
    );
    // gc keeps every pack a live version needs, dangling rows or not.
    let before = pack_bytes(&env);
    env.run(&["gc", "--grace", "0s"]);
    assert_eq!(pack_bytes(&env), before);
}
