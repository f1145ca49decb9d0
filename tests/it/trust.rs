//! Trust: sequences of user actions that once lost data or corrupted it silently (issue 9).
//! Each test is the reproduction from the review, and fails on the code before the fix.

use crate::common::{TestEnv, pseudo_random, push_to_file_remote, settle, version_ids};

/// `verify`'s problems (exit 0 when none, 5 when some).
fn problems(env: &TestEnv) -> Vec<serde_json::Value> {
    let output = env.run(&["--json", "verify"]);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let problems = report["problems"].as_array().unwrap().clone();
    let expected = if problems.is_empty() { 0 } else { 5 };
    assert_eq!(output.status.code(), Some(expected), "{report}");
    problems
}

/// Commits `d` and then another directory to `ds`, moves `d` away while `let_go` lets the
/// data of `d`'s version go (given its id), moves it back, and checks that the next commit of
/// `d` reads every file again (no stat-cache entry vouches for data the store let go), that
/// the store verifies and that the version committed gives the files back.
fn a_commit_reads_again_what_was_let_go(seed: u64, let_go: impl FnOnce(&TestEnv, &str)) {
    let env = TestEnv::new();
    env.write("d/a.bin", pseudo_random(300_000, seed));
    env.write("d/small.txt", "hello\n");
    settle(&env); // so the stat cache trusts what the commit hashes
    env.ok(&["commit", "d", "-d", "ds"]);
    let v1 = version_ids(&env, "ds")[0].clone();
    env.write("other/b.bin", pseudo_random(10_000, seed + 1));
    env.ok(&["commit", "other", "-d", "ds"]);
    std::fs::rename(env.path("d"), env.path("away")).unwrap();
    let_go(&env, &v1);
    std::fs::rename(env.path("away"), env.path("d")).unwrap();
    let report = env.json(&["commit", "d", "-d", "ds"]);
    // Both files had to be read again: the store no longer held them.
    assert_eq!(report["files_unchanged"], 0, "{report}");
    assert!(problems(&env).is_empty());
    env.ok(&["verify", "--full"]);
    let version = report["version"].as_str().unwrap();
    env.ok(&["checkout", &format!("ds@{}", &version[..12]), "back"]);
    assert_eq!(
        std::fs::read(env.path("back/a.bin")).unwrap(),
        pseudo_random(300_000, seed)
    );
}

/// Finding 1: a stat-cache entry must not vouch for a file id that gc freed.
#[test]
fn a_stat_cache_never_vouches_for_data_gc_freed() {
    a_commit_reads_again_what_was_let_go(1, |env, v1| {
        env.ok(&["rm", &format!("ds@{}", &v1[..12])]);
        env.ok(&["gc"]);
    });
}

/// A stat-cache entry vouches for the workspace's version at its path (schema 11), so it
/// vouches for nothing once that version's data may be gone: here `cache prune` evicts the
/// version (its directory had been moved away, so no workspace held it) and frees its chunks.
#[test]
fn a_stat_cache_never_vouches_for_a_version_cache_prune_evicted() {
    a_commit_reads_again_what_was_let_go(41, |env, v1| {
        push_to_file_remote(env, "remote", "ds");
        env.ok(&["cache", "prune"]);
        let listed = env.json(&["cache", "ls"]);
        let evicted = listed
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["version"] == v1)
            .unwrap();
        assert_eq!(evicted["evicted"], true, "{listed}");
    });
}

/// A vouched file's id comes from the version the workspace holds, at the same path: after
/// a checkout switches the directory back to an older version in place (files of the same
/// size rewritten), a commit reads nothing and records exactly that older version, and
/// status finds nothing to hash.
#[test]
fn after_an_in_place_checkout_the_stat_cache_vouches_for_the_version_checked_out() {
    let env = TestEnv::new();
    for i in 0..20u64 {
        env.write(
            &format!("d/sub{}/f{i}.bin", i % 3),
            pseudo_random(1_000, 100 + i),
        );
    }
    settle(&env);
    env.ok(&["commit", "d", "-d", "ds", "-t", "v1"]);
    // Same sizes, other bytes: only the ids tell them apart.
    env.write("d/sub0/f3.bin", pseudo_random(1_000, 900));
    env.write("d/sub1/f7.bin", pseudo_random(1_000, 901));
    settle(&env);
    env.ok(&["commit", "d", "-d", "ds", "-t", "v2"]);
    env.ok(&["checkout", "ds@v1", "d"]);
    for (path, seed) in [("d/sub0/f3.bin", 103), ("d/sub1/f7.bin", 107)] {
        assert_eq!(
            std::fs::read(env.path(path)).unwrap(),
            pseudo_random(1_000, seed),
            "{path}"
        );
    }
    let status = env.json(&["status", "d"]);
    assert_eq!(status["changes"], serde_json::json!([]), "{status}");
    assert_eq!(status["files_hashed"], 0, "{status}");
    let report = env.json(&["commit", "d", "-d", "ds"]);
    assert_eq!(report["files_unchanged"], 20, "{report}");
    assert_eq!(report["created"], false, "the directory is v1: {report}");
    let v1 = env.json(&["show", "ds@v1"]);
    assert_eq!(report["version"], v1["id"], "{report} {v1}");
}

/// An entry vouches for the workspace's version at its path: a commit that leaves a file
/// out (`--exclude`) records a version without it, so the file's entry goes; status then
/// reports it added (hashing it), and the next commit reads it again.
#[test]
fn a_file_left_out_of_a_commit_loses_its_stat_cache_entry() {
    let env = TestEnv::new();
    env.write("d/keep.txt", "keep\n");
    env.write("d/out.bin", pseudo_random(50_000, 43));
    settle(&env);
    env.ok(&["commit", "d", "-d", "ds"]);
    let second = env.json(&["commit", "d", "-d", "ds", "--exclude", "out.bin"]);
    assert_eq!(second["files"], 1, "{second}");
    assert_eq!(second["files_unchanged"], 1, "{second}");
    let status = env.json(&["status", "d"]);
    assert_eq!(status["files_hashed"], 1, "{status}");
    let changes = status["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 1, "{status}");
    assert_eq!(changes[0]["path"], "out.bin");
    assert_eq!(changes[0]["change"], "added");
    let third = env.json(&["commit", "d", "-d", "ds"]);
    assert_eq!(third["files"], 2, "{third}");
    assert_eq!(third["files_unchanged"], 1, "{third}");
    let status = env.json(&["status", "d"]);
    assert_eq!(status["files_hashed"], 0, "{status}");
    assert_eq!(status["changes"], serde_json::json!([]), "{status}");
}

/// A progress that runs its action once, when commit starts reading the files it listed:
/// after every lstat of the walk, before any file is read.
struct AtReading(std::sync::Mutex<Option<Box<dyn FnOnce() + Send>>>);

impl dsv::progress::Progress for AtReading {
    fn start(&self, phase: &str, _total: u64, _unit: dsv::progress::Unit) {
        if phase == "reading"
            && let Some(action) = self.0.lock().unwrap().take()
        {
            action();
        }
    }
    fn advance(&self, _amount: u64) {}
    fn finish(&self) {}
}

/// A file replaced between commit's walk and its read by one of the same size and mtime:
/// here its directory is renamed away while commit runs and back afterwards, which keeps the
/// file's ctime, so the walk's stat would match it again. The commit records what it read,
/// but caches no stat for it, so the next commit reads the file that is back. A stat that
/// moves in its ctime alone while the file is read (a hard link made meanwhile) does not
/// fail the commit, and leaves that file uncached too.
#[test]
fn a_file_replaced_while_commit_runs_is_not_cached_under_the_walks_stat() {
    use dsv::ops::commit::{CommitOptions, commit};
    let temp = tempfile::tempdir_in(crate::common::temp_base()).unwrap();
    let root = temp.path().to_path_buf();
    let mut store = dsv::Store::init(&root).unwrap();
    let dir = root.join("w");
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::new(1_000_000, 123_456_789);
    let write_dated = move |path: &std::path::Path, bytes: &[u8]| {
        std::fs::write(path, bytes).unwrap();
        std::fs::File::options()
            .write(true)
            .open(path)
            .unwrap()
            .set_modified(old)
            .unwrap();
    };
    write_dated(&dir.join("sub/f"), b"YYYY");
    std::fs::write(dir.join("keep"), b"keep").unwrap();
    settle(&root);
    let options = CommitOptions::new("ds");
    let id_of = |store: &dsv::Store, version: &dsv::ObjectId| {
        let record = store.catalog().version(version).unwrap().unwrap();
        let listing = dsv::tree::flatten_version(&mut store.reader(), &record.version).unwrap();
        listing.iter().find(|e| e.path == "sub/f").unwrap().id
    };

    let swapped = dir.clone();
    let swap = AtReading(std::sync::Mutex::new(Some(Box::new(move || {
        std::fs::rename(swapped.join("sub"), swapped.join("sub.away")).unwrap();
        std::fs::create_dir(swapped.join("sub")).unwrap();
        write_dated(&swapped.join("sub/f"), b"XXXX");
    }))));
    let first = commit(&mut store, &dir, &options, &swap).unwrap();
    assert_eq!(id_of(&store, &first.version), dsv::ObjectId::of(b"XXXX"));
    std::fs::remove_dir_all(dir.join("sub")).unwrap();
    std::fs::rename(dir.join("sub.away"), dir.join("sub")).unwrap();
    let second = commit(&mut store, &dir, &options, &dsv::progress::NoProgress).unwrap();
    assert_eq!(second.files_unchanged, 1, "only `keep` is vouched for");
    assert_eq!(id_of(&store, &second.version), dsv::ObjectId::of(b"YYYY"));

    // A new content (same size and mtime, a new ctime), read while a hard link is made.
    write_dated(&dir.join("sub/f"), b"ZZZZ");
    settle(&root);
    let linked = (dir.join("sub/f"), root.join("link"));
    let link = AtReading(std::sync::Mutex::new(Some(Box::new(move || {
        std::fs::hard_link(&linked.0, &linked.1).unwrap();
    }))));
    let third = commit(&mut store, &dir, &options, &link).unwrap();
    assert_eq!(id_of(&store, &third.version), dsv::ObjectId::of(b"ZZZZ"));
    let fourth = commit(&mut store, &dir, &options, &dsv::progress::NoProgress).unwrap();
    assert_eq!(fourth.files_unchanged, 1, "sub/f is read again: {fourth:?}");
    assert!(!fourth.created);
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

/// A store with two datasets, tags, a pin, a removed version and a remote.
fn populated(env: &TestEnv) -> Vec<(String, String)> {
    env.write("a/x.bin", pseudo_random(400_000, 21));
    env.write("a/y.txt", "one\n");
    env.ok(&["commit", "a", "-d", "alpha", "-t", "v1"]);
    env.write("a/y.txt", "two\n");
    env.ok(&["commit", "a", "-d", "alpha", "-t", "v2"]);
    env.write("a/z.txt", "three\n");
    env.ok(&["commit", "a", "-d", "alpha"]);
    env.write("b/w.bin", pseudo_random(100_000, 22));
    env.ok(&["commit", "b", "-d", "beta", "-t", "first"]);
    env.write("b/w2.bin", pseudo_random(50_000, 27));
    env.ok(&["commit", "b", "-d", "beta"]);
    env.ok(&["pin", "alpha@v1", "--reason", "paper"]);
    // A removed version: its removal must survive a repair too.
    env.write("g/x.txt", "x1\n");
    env.ok(&["commit", "g", "-d", "gamma"]);
    env.write("g/x.txt", "x2\n");
    env.ok(&["commit", "g", "-d", "gamma"]);
    let old_gamma = version_ids(env, "gamma")[1].clone();
    std::fs::remove_dir_all(env.path("g")).unwrap();
    env.ok(&["rm", &format!("gamma@{}", &old_gamma[..12])]);
    push_to_file_remote(env, "remote", "alpha");
    let mut revisions = Vec::new();
    for dataset in ["alpha", "beta"] {
        for id in version_ids(env, dataset) {
            revisions.push((dataset.to_string(), id));
        }
    }
    revisions
}

/// What a user sees of the store's names (a pin's creation time and a removal's time are
/// the repair's).
fn names(env: &TestEnv) -> (serde_json::Value, serde_json::Value, serde_json::Value) {
    let mut pins = env.json(&["pins"]);
    for pin in pins.as_array_mut().unwrap() {
        pin.as_object_mut().unwrap().remove("created_at");
    }
    // A removal's time is the repair's, like a pin's creation time: compare whether removed.
    let mut logs = serde_json::json!([env.json(&["log", "alpha"]), env.json(&["log", "gamma"])]);
    for log in logs.as_array_mut().unwrap() {
        for version in log.as_array_mut().unwrap() {
            let removed = version.get("removed_at").is_some_and(|t| !t.is_null());
            version["removed_at"] = serde_json::Value::Bool(removed);
        }
    }
    (env.json(&["ls"]), logs, pins)
}

/// Finding 2: losing `catalog.db` loses no version, head, tag, pin or remote.
#[test]
fn a_deleted_catalog_is_rebuilt_from_the_packs_and_the_ref_log() {
    let env = TestEnv::new();
    let revisions = populated(&env);
    let before = names(&env);
    let remotes_before = env.json(&["remote", "ls"]);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(env.path(&format!(".dsv/catalog.db{suffix}")));
    }
    // Nothing pretends the store is new or empty, and nothing deletes.
    let error = env.json_error(&["ls"], 5);
    assert!(
        error["message"].as_str().unwrap().contains("lost"),
        "{error}"
    );
    assert!(error.to_string().contains("dsv repair"), "{error}");
    env.fails(&["init"], 5);
    env.fails(&["gc"], 5);
    let report = env.json(&["repair"]);
    assert_eq!(report["heads"], 3, "{report}");
    assert_eq!(report["tags"], 3, "{report}");
    assert_eq!(report["remotes"], 1, "{report}");
    assert_eq!(report["pins"], 1, "{report}");
    assert_eq!(report["removed"], 1, "{report}");
    assert_eq!(report["versions"], 7, "{report}");
    assert!(report["missing_versions"].as_array().unwrap().is_empty());
    assert_eq!(names(&env), before);
    // The remote is back; what the store knew of its refs comes back with a fetch.
    env.ok(&["fetch"]);
    let remotes_after = env.json(&["remote", "ls"]);
    assert_eq!(remotes_after[0]["url"], remotes_before[0]["url"]);
    assert_eq!(
        remotes_after[0]["refs"].as_array().unwrap().len(),
        remotes_before[0]["refs"].as_array().unwrap().len()
    );
    env.ok(&["verify", "--full"]);
    for (i, (dataset, id)) in revisions.iter().enumerate() {
        let out = format!("out{i}");
        env.ok(&["checkout", &format!("{dataset}@{}", &id[..12]), &out]);
        env.ok(&[
            "audit",
            &out,
            "--against",
            &format!("{dataset}@{}", &id[..12]),
        ]);
    }
    // The store goes on: a new commit, then the ref log still agrees with the catalog.
    env.write("a/new.txt", "four\n");
    env.ok(&["commit", "a", "-d", "alpha", "-t", "v4"]);
    assert!(problems(&env).is_empty());
}

/// Finding 2: a catalog truncated to 0 bytes is not a new, empty store.
#[test]
fn a_truncated_catalog_is_refused_until_repaired_and_gc_deletes_nothing() {
    let env = TestEnv::new();
    populated(&env);
    let before = names(&env);
    let packs = std::fs::read_dir(env.path(".dsv/packs")).unwrap().count();
    std::fs::write(env.path(".dsv/catalog.db"), b"").unwrap();
    for suffix in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(env.path(&format!(".dsv/catalog.db{suffix}")));
    }
    env.fails(&["ls"], 5);
    env.fails(&["verify"], 5);
    env.fails(&["gc", "--grace", "0s"], 5);
    assert_eq!(
        std::fs::read_dir(env.path(".dsv/packs")).unwrap().count(),
        packs
    );
    env.ok(&["repair"]);
    assert_eq!(names(&env), before);
    env.ok(&["verify", "--full"]);
}

/// The ref log is checked: verify reports a catalog that forgot what the ref log names, and
/// gc keeps an unnamed pack holding a version the ref log names.
#[test]
fn verify_and_gc_account_for_versions_the_ref_log_names() {
    let env = TestEnv::new();
    populated(&env);
    assert!(problems(&env).is_empty());
    let packs = |env: &TestEnv| -> std::collections::BTreeSet<String> {
        std::fs::read_dir(env.path(".dsv/packs"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    };
    let before = packs(&env);
    env.write("b/late.bin", pseudo_random(30_000, 24));
    env.ok(&["commit", "b", "-d", "beta", "-t", "late"]);
    let late = version_ids(&env, "beta")[0].clone();
    let new_packs: Vec<String> = packs(&env).difference(&before).cloned().collect();
    assert!(!new_packs.is_empty());
    // Damage: the catalog forgets the commit (its pack, version, tag and head move).
    let db = rusqlite::Connection::open(env.path(".dsv/catalog.db")).unwrap();
    let late_bytes: Vec<u8> = (0..32)
        .map(|i| u8::from_str_radix(&late[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    db.execute_batch("PRAGMA foreign_keys = OFF").unwrap();
    for name in &new_packs {
        let id: Vec<u8> = (0..32)
            .map(|i| u8::from_str_radix(&name[2 * i..2 * i + 2], 16).unwrap())
            .collect();
        db.execute(
            "DELETE FROM objects WHERE frame IN (SELECT f.id FROM frames f JOIN packs p ON p.id = f.pack WHERE p.pack_id = ?1)",
            [&id],
        )
        .unwrap();
        db.execute(
            "DELETE FROM frames WHERE pack IN (SELECT id FROM packs WHERE pack_id = ?1)",
            [&id],
        )
        .unwrap();
        db.execute("DELETE FROM packs WHERE pack_id = ?1", [&id])
            .unwrap();
    }
    db.execute("DELETE FROM tags WHERE version = ?1", [&late_bytes])
        .unwrap();
    db.execute(
        "UPDATE datasets SET head = (SELECT parent FROM versions WHERE id = ?1) WHERE name = 'beta'",
        [&late_bytes],
    )
    .unwrap();
    db.execute("DELETE FROM workspaces", []).unwrap();
    db.execute("DELETE FROM versions WHERE id = ?1", [&late_bytes])
        .unwrap();
    drop(db);
    let found = problems(&env);
    let text = serde_json::Value::Array(found.clone()).to_string();
    assert!(text.contains("dsv repair"), "{text}");
    assert!(text.contains("head of beta"), "{text}");
    // gc goes on with the rest and keeps the pack, saying why.
    let gc = env.json(&["gc", "--grace", "0s"]);
    assert!(
        gc["orphans"]
            .as_array()
            .unwrap()
            .iter()
            .all(|o| o["deleted"] == false && o["holds_versions"] == true),
        "{gc}"
    );
    assert_eq!(packs(&env).len(), before.len() + new_packs.len());
    env.ok(&["repair"]);
    let log = env.json(&["log", "beta"]);
    assert_eq!(log.as_array().unwrap().len(), 3, "{log}");
    assert!(problems(&env).is_empty());
    env.ok(&["checkout", "beta@late", "late"]);
}

/// Finding 4: a file map fetched from one remote must not shadow the right one from another.
/// It is proven (its chunks reassembled to the file id) before it is trusted; a wrong one is
/// rejected naming the remote, forgotten, and the right one is fetched again.
#[test]
fn a_hostile_file_map_from_another_remote_is_rejected_and_the_right_one_fetched() {
    use dsv::object::ObjectKind;
    let honest = TestEnv::new();
    let content = pseudo_random(3_000_000, 31);
    honest.write("d/big.bin", &content);
    honest.ok(&["commit", "d", "-d", "honest"]);
    let (r1, _) = push_to_file_remote(&honest, "r1", "honest");
    let file_id: dsv::ObjectId = honest.json(&["ls", "honest"])[0]["id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();

    // The attacker: a file of the same size, pushed, plus a pack whose file map for the
    // honest file's id lists the attacker's chunks.
    let attacker = TestEnv::new();
    attacker.write("d/big.bin", pseudo_random(3_000_000, 32));
    attacker.ok(&["commit", "d", "-d", "bait"]);
    let (r2, _) = push_to_file_remote(&attacker, "r2", "bait");
    let bait_id: dsv::ObjectId = attacker.json(&["ls", "bait"])[0]["id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let store = dsv::Store::open(&attacker.path(".dsv")).unwrap();
    let map = store.reader().bytes(&bait_id, ObjectKind::FileMap).unwrap();
    crate::common::forge_pack(&attacker, &r2, &[(file_id, ObjectKind::FileMap, map)]);

    // The victim knows both remotes and fetches the attacker's first.
    let victim = TestEnv::new();
    victim.ok(&["remote", "add", "evil", &format!("file://{}", r2.display())]);
    victim.ok(&[
        "remote",
        "add",
        "origin",
        &format!("file://{}", r1.display()),
    ]);
    victim.ok(&["fetch", "--remote", "evil"]);
    victim.ok(&["fetch", "--remote", "origin"]);
    victim.ok(&["pull", "honest", "--remote", "origin"]);
    // verify finds the map wrong and names where it came from.
    let found = serde_json::Value::Array(problems(&victim)).to_string();
    assert!(found.contains("remote evil"), "{found}");
    // A ranged read never serves the attacker's bytes.
    let error = victim.json_error(&["cat", "honest:big.bin", "--range", "0..100"], 5);
    assert!(error.to_string().contains("remote evil"), "{error}");
    // The wrong map is forgotten: the next pull fetches the right one, and all is well.
    victim.ok(&["pull", "honest", "--remote", "origin"]);
    let out = victim
        .dsv()
        .args(["cat", "honest:big.bin"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(out.stdout, content);
    assert!(problems(&victim).is_empty());
    victim.ok(&["checkout", "honest", "out"]);
    assert_eq!(std::fs::read(victim.path("out/big.bin")).unwrap(), content);
}

/// Workspaces are the user's to list and forget; a record follows its directory; `rm` names
/// every holder; a workspace whose version was removed says so (exit 3), not "corrupt".
#[test]
fn workspaces_are_listed_forgotten_and_follow_their_directory() {
    let env = TestEnv::new();
    env.write("src/a.txt", "a\n");
    env.ok(&["commit", "src", "-d", "ds", "-t", "v1"]);
    env.ok(&["checkout", "ds@v1", "copy"]);
    env.write("src/a.txt", "b\n");
    env.ok(&["commit", "src", "-d", "ds"]);
    let listed = env.json(&["workspace", "ls"]);
    assert_eq!(listed.as_array().unwrap().len(), 2, "{listed}");
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .all(|w| w["exists"] == true)
    );
    // `copy` holds v1: rm names it and the way out.
    let error = env.json_error(&["rm", "ds@v1", "--force"], 3);
    let text = error.to_string();
    assert!(text.contains("copy"), "{text}");
    assert!(text.contains("workspace forget"), "{text}");
    // A directory deleted and made again at the same path is not the old workspace.
    std::fs::remove_dir_all(env.path("copy")).unwrap();
    std::fs::create_dir(env.path("copy")).unwrap();
    let listed = env.json(&["workspace", "ls"]);
    let copy = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["path"].as_str().unwrap().ends_with("/copy"))
        .unwrap()
        .clone();
    assert_eq!(copy["exists"], false, "{listed}");
    env.fails(&["status", "copy"], 3);
    // Forgetting releases the version; the directory stays.
    env.write("copy/mine.txt", "keep me\n");
    env.ok(&["workspace", "forget", "copy"]);
    assert_eq!(env.json(&["workspace", "ls"]).as_array().unwrap().len(), 1);
    assert!(env.path("copy/mine.txt").exists());
    env.fails(&["workspace", "forget", "copy"], 3);
    // A workspace whose version was removed says so.
    env.ok(&["checkout", "ds@v1", "old"]);
    env.ok(&["workspace", "forget", "old"]);
    env.ok(&["rm", "ds@v1", "--force"]);
    env.ok(&["checkout", "ds", "old2"]);
    env.ok(&["workspace", "forget", "old2"]);
    // Hand-made: a record of a removed version (commit old as v-removed then rm it).
    env.write("w/x.txt", "x\n");
    env.ok(&["commit", "w", "-d", "other"]);
    env.write("w2/y.txt", "y\n");
    env.ok(&["commit", "w2", "-d", "other"]);
    let first = version_ids(&env, "other")[1].clone();
    std::fs::rename(env.path("w"), env.path("w-away")).unwrap();
    env.ok(&["rm", &format!("other@{}", &first[..12])]);
    std::fs::rename(env.path("w-away"), env.path("w")).unwrap();
    let error = env.json_error(&["status", "w"], 3);
    assert!(error.to_string().contains("removed"), "{error}");
    assert!(!error.to_string().contains("corrupt"), "{error}");
}

/// A remote ref naming a version the remote lacks is reported as the remote's fault, by its
/// key, not as a catalog constraint; nothing is recorded.
#[test]
fn a_ref_naming_a_version_the_remote_lacks_says_so() {
    let env = TestEnv::new();
    env.write("d/a.txt", "a\n");
    env.ok(&["commit", "d", "-d", "real"]);
    let (remote, url) = push_to_file_remote(&env, "remote", "real");
    std::fs::write(
        remote.join("refs/heads/ghost"),
        format!("{}\n", "ab".repeat(32)),
    )
    .unwrap();
    let clone = TestEnv::bare();
    let error = clone.json_error(&["clone", &url, "c"], 5);
    let text = error.to_string();
    assert!(text.contains("refs/heads/ghost"), "{text}");
    assert!(!text.to_lowercase().contains("foreign key"), "{text}");
    // Nothing of the failed clone is left.
    assert!(!clone.path("c").exists());
}

/// A commit killed between its ref log append and its catalog transaction leaves lines past
/// what the catalog applied: they change nothing (verify is clean), the next change moves
/// them to `reflog.unapplied` (never destroyed), and repair still gives a whole store.
#[test]
fn ref_log_lines_of_a_transaction_that_never_committed_are_set_aside() {
    let env = TestEnv::new();
    env.write("d/a.txt", "a\n");
    env.ok(&["commit", "d", "-d", "ds", "-t", "v1"]);
    let log = env.path(".dsv/reflog");
    let before = std::fs::read(&log).unwrap();
    let void = format!(
        "{{\"time\":1,\"op\":\"head\",\"dataset\":\"ds\",\"version\":\"{}\"}}\n",
        "cd".repeat(32)
    );
    let mut grown = before.clone();
    grown.extend_from_slice(void.as_bytes());
    std::fs::write(&log, &grown).unwrap();
    assert!(problems(&env).is_empty());
    env.write("d/b.txt", "b\n");
    env.ok(&["commit", "d", "-d", "ds"]);
    assert_eq!(
        std::fs::read_to_string(env.path(".dsv/reflog.unapplied")).unwrap(),
        void
    );
    assert!(
        !std::fs::read_to_string(&log)
            .unwrap()
            .contains(&"cd".repeat(32))
    );
    assert!(problems(&env).is_empty());
    let head = version_ids(&env, "ds")[0].clone();
    std::fs::remove_file(env.path(".dsv/catalog.db")).unwrap();
    env.ok(&["repair"]);
    assert_eq!(version_ids(&env, "ds")[0], head);
    env.ok(&["checkout", "ds@v1", "v1"]);
    assert!(problems(&env).is_empty());
}

/// Review findings: a catalog restored from an older copy must not let gc delete a newer
/// version's pack (verify reports it, gc keeps it, repair restores its names); repair of a
/// healthy catalog with its ref log gone keeps the catalog's names; repairs never overwrite
/// an earlier repair's backups; repair refuses while another process has the store open.
#[test]
fn repair_and_gc_reconcile_a_catalog_and_a_ref_log_that_disagree() {
    let env = TestEnv::new();
    env.write("w/a", pseudo_random(100_000, 71));
    env.ok(&["commit", "w", "-d", "ds", "-t", "v1"]);
    std::fs::copy(env.path(".dsv/catalog.db"), env.path("backup.db")).unwrap();
    env.write("w/b", pseudo_random(100_000, 73));
    env.ok(&["commit", "w", "-d", "ds", "-t", "v2"]);
    let v2 = version_ids(&env, "ds")[0].clone();
    for suffix in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(env.path(&format!(".dsv/catalog.db{suffix}")));
    }
    std::fs::copy(env.path("backup.db"), env.path(".dsv/catalog.db")).unwrap();
    let report = env.run(&["--json", "verify"]);
    let report: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
    assert_eq!(report["unrecorded_versions"][0], v2.as_str(), "{report}");
    let gc = env.json(&["gc", "--grace", "0s"]);
    assert!(
        gc["orphans"]
            .as_array()
            .unwrap()
            .iter()
            .all(|o| o["deleted"] == false),
        "{gc}"
    );
    // A change in between moves the newer lines aside; gc still keeps the pack.
    env.ok(&["pin", "ds@v1"]);
    env.json(&["gc", "--grace", "0s"]);
    let repaired = env.json(&["repair"]);
    assert_eq!(repaired["names_from"], "ref log", "{repaired}");
    let log = version_ids(&env, "ds");
    assert!(log.contains(&v2), "{log:?}");
    env.ok(&["checkout", &format!("ds@{}", &v2[..12]), "out"]);

    // The ref log gone from a healthy store: repair keeps the catalog's names.
    let before = (
        env.json(&["ls"]),
        env.json(&["pins"]).as_array().unwrap().len(),
    );
    std::fs::remove_file(env.path(".dsv/reflog")).unwrap();
    let repaired = env.json(&["repair"]);
    assert_eq!(repaired["names_from"], "catalog", "{repaired}");
    assert_eq!(
        (
            env.json(&["ls"]),
            env.json(&["pins"]).as_array().unwrap().len()
        ),
        before
    );
    // Twice in a row: every backup stays.
    env.ok(&["repair"]);
    let backups = std::fs::read_dir(env.path(".dsv"))
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            let name = name.to_string_lossy();
            name.starts_with("catalog.db.before-repair-")
                && !name.ends_with("-wal")
                && !name.ends_with("-shm")
        })
        .count();
    assert_eq!(backups, 3);
    assert!(problems(&env).is_empty());

    // Another process has the store open: repair refuses and changes nothing.
    let mut reader = env.spawn(&["export", "ds", "-o", "/dev/null"]);
    let _ = reader.wait();
    let store = dsv::Store::open(&env.path(".dsv")).unwrap();
    let error = env.json_error(&["repair"], 3);
    assert!(error.to_string().contains("open"), "{error}");
    drop(store);
    env.ok(&["repair"]);
}

/// Review findings: export never writes into a store; an I/O error while printing JSON is
/// exit 6; a directory or symlink given to cat says what it is.
#[test]
fn export_output_inside_a_store_is_refused_and_json_io_errors_exit_6() {
    let env = TestEnv::new();
    env.write("d/sub/a.txt", "a\n");
    std::os::unix::fs::symlink("sub/a.txt", env.path("d/link")).unwrap();
    env.ok(&["commit", "d", "-d", "ds"]);
    let catalog = std::fs::read(env.path(".dsv/catalog.db")).unwrap();
    env.fails(&["export", "ds", "-o", ".dsv/catalog.db"], 3);
    env.fails(&["export", "ds", "-o", ".dsv/packs/x.pack"], 3);
    assert_eq!(std::fs::read(env.path(".dsv/catalog.db")).unwrap(), catalog);
    assert!(!env.path(".dsv/packs/x.pack").exists());
    let full = std::fs::File::create("/dev/full").unwrap();
    let status = env
        .command()
        .args(["--json", "ls", "ds"])
        .stdout(full)
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(6));
    for (path, kind) in [("sub", "directory"), ("link", "symlink")] {
        let error = env.json_error(&["cat", &format!("ds:{path}")], 3);
        assert!(error.to_string().contains(kind), "{error}");
    }
    let error = env.json_error(&["export", "ds", "--include", "[", "-o", "x.tar"], 3);
    assert!(error.to_string().contains("pattern"), "{error}");
}
