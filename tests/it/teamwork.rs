//! Teamwork through a remote (issue 24): `dsv pull --rebase` and `dsv rebase` replay local
//! versions onto a teammate's when they changed different paths, refuse (exit 4, changing
//! nothing) when they did not, and move a clean workspace along; `status` says when a
//! workspace is behind a head; push's refusal points at `pull --rebase`.

use std::path::Path;
use std::process::Output;

use insta::assert_snapshot;
use serde_json::Value;

use crate::common::{TestEnv, assert_same_tree, settle, snapshot_tree, version_ids};

/// `dsv ARGS` run in `dir` (relative to the environment's root).
fn run_in(env: &TestEnv, dir: &str, args: &[&str]) -> Output {
    env.dsv()
        .current_dir(env.path(dir))
        .args(args)
        .output()
        .expect("run dsv")
}

/// `dsv --json ARGS` in `dir`, expecting exit `code`; the JSON on stdout.
fn json_in(env: &TestEnv, dir: &str, args: &[&str], code: i32) -> Value {
    let mut full = vec!["--json"];
    full.extend_from_slice(args);
    let out = run_in(env, dir, &full);
    assert_eq!(
        out.status.code(),
        Some(code),
        "dsv {args:?} in {dir}\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

/// Exit code, stdout and stderr of `dsv ARGS` in `dir`, normalized for a snapshot.
fn human_in(env: &TestEnv, dir: &str, args: &[&str]) -> String {
    let out = run_in(env, dir, args);
    env.normalize(&format!(
        "exit: {}\n--- stdout\n{}--- stderr\n{}",
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}

/// Alice's store (`.dsv` at her root, workspace `ws`) with dataset `m` pushed to a `file://`
/// remote, and Bob's clone of it (`store`, workspace `store/ws`). Returns (alice, bob, url).
fn team(files: &[(&str, &str)]) -> (TestEnv, TestEnv, String) {
    let alice = TestEnv::new();
    for (path, content) in files {
        alice.write(&format!("ws/{path}"), content);
    }
    alice.ok(&["commit", "ws", "-d", "m", "-m", "base"]);
    let (_, url) = crate::common::push_to_file_remote(&alice, "remote", "m");
    let bob = TestEnv::bare();
    bob.ok(&["clone", &url, "store"]);
    assert!(
        run_in(&bob, "store", &["checkout", "m", "ws"])
            .status
            .success()
    );
    settle(&alice);
    settle(&bob);
    (alice, bob, url)
}

/// Commits the workspace `dir` with `message` and pushes (run inside it).
fn commit_and_push(env: &TestEnv, dir: &str, message: &str) {
    settle(env);
    json_in(env, dir, &["commit", "-m", message], 0);
    json_in(env, dir, &["push"], 0);
}

fn reflog(env: &TestEnv) -> Vec<u8> {
    std::fs::read(env.path(".dsv/reflog")).unwrap()
}

#[test]
fn a_move_and_a_deletion_by_two_clones_merge_and_a_third_clone_sees_both() {
    let (alice, bob, url) = team(&[
        ("keep.txt", "keep\n"),
        ("move-me.txt", "moving\n"),
        ("delete-me.txt", "going\n"),
        ("sub/a.txt", "a\n"),
    ]);
    // Bob moves a file and pushes.
    std::fs::create_dir_all(bob.path("store/ws/moved")).unwrap();
    std::fs::rename(
        bob.path("store/ws/move-me.txt"),
        bob.path("store/ws/moved/move-me.txt"),
    )
    .unwrap();
    commit_and_push(&bob, "store/ws", "move");
    // Alice deletes another and commits; her push is refused, pointing at pull --rebase.
    std::fs::remove_file(alice.path("ws/delete-me.txt")).unwrap();
    settle(&alice);
    json_in(&alice, "ws", &["commit", "-m", "delete"], 0);
    let refused = alice.json_error(&["push"], 4);
    let hint = refused["hints"][0].as_str().unwrap();
    assert!(hint.contains("dsv pull m --rebase"), "{refused}");
    assert!(!hint.contains("--force"), "{refused}");
    let old_head = version_ids(&alice, "m")[0].clone();

    // A dry run fetches and plans, and changes nothing.
    let log_before = reflog(&alice);
    let planned = json_in(&alice, "ws", &["pull", "--rebase", "--dry-run"], 0);
    let plan = &planned["rebase"];
    assert_eq!(plan["status"], "rebased", "{planned}");
    assert_eq!(plan["dry_run"], true);
    assert_eq!(plan["replayed"][0]["kept"], true);
    assert!(plan["replayed"][0]["version"].is_null(), "{planned}");
    assert_eq!(plan["workspace"]["status"], "would-move", "{planned}");
    assert_eq!(version_ids(&alice, "m")[0], old_head);
    assert_eq!(reflog(&alice), log_before);
    assert!(alice.path("ws/move-me.txt").exists());

    // The real thing, from inside the workspace (the dataset is the workspace's).
    let pulled = json_in(&alice, "ws", &["pull", "--rebase"], 0);
    assert_eq!(pulled["head"], "diverged", "{pulled}");
    let rebase = &pulled["rebase"];
    assert_eq!(rebase["status"], "rebased", "{pulled}");
    assert_eq!(rebase["old_head"], old_head.as_str());
    assert_eq!(rebase["replayed"][0]["from"], old_head.as_str());
    assert_eq!(rebase["replayed"][0]["message"], "delete");
    let new_head = rebase["head"].as_str().unwrap().to_string();
    assert_eq!(rebase["replayed"][0]["version"], new_head.as_str());
    assert_eq!(rebase["workspace"]["status"], "moved", "{pulled}");
    // The new version keeps message and author, descends from Bob's, and holds both edits.
    let shown = alice.json(&["show", &format!("m@{new_head}")]);
    assert_eq!(shown["message"], "delete", "{shown}");
    assert_eq!(shown["author"], "tester", "{shown}");
    assert_eq!(shown["parent"], pulled["version"], "{shown}");
    assert!(
        String::from_utf8(reflog(&alice))
            .unwrap()
            .contains(&new_head)
    );
    // The workspace moved with the head, and is clean there.
    assert!(alice.path("ws/moved/move-me.txt").exists());
    assert!(!alice.path("ws/move-me.txt").exists());
    assert!(!alice.path("ws/delete-me.txt").exists());
    let status = json_in(&alice, "ws", &["status"], 0);
    assert_eq!(status["version"], new_head.as_str(), "{status}");
    assert_eq!(status["changes"].as_array().unwrap().len(), 0, "{status}");
    // Ahead of the remote by the replayed version, until pushed.
    assert_eq!(status["heads"][0]["name"], "origin/m", "{status}");
    assert_eq!(status["heads"][0]["ahead"], 1, "{status}");
    assert_eq!(status["heads"][0]["behind"], 0, "{status}");

    // Now the push is a fast-forward, and a third clone checks out both edits.
    let pushed = alice.json(&["push"]);
    assert_eq!(pushed["refs"][0]["status"], "updated", "{pushed}");
    let status = json_in(&alice, "ws", &["status"], 0);
    assert_eq!(status["heads"].as_array().unwrap().len(), 0, "{status}");
    let carol = TestEnv::bare();
    carol.ok(&["clone", &url, "store"]);
    assert!(
        run_in(&carol, "store", &["checkout", "m", "out"])
            .status
            .success()
    );
    assert_same_tree(&alice.path("ws"), &carol.path("store/out"));
    let files: Vec<String> = snapshot_tree(&carol.path("store/out"))
        .into_keys()
        .collect();
    assert_eq!(
        files,
        ["keep.txt", "moved", "moved/move-me.txt", "sub", "sub/a.txt"],
        "{files:?}"
    );
}

#[test]
fn the_same_path_changed_differently_is_a_conflict_and_nothing_changes() {
    let (alice, bob, _) = team(&[("labels.csv", "a,1\n"), ("other.txt", "o\n")]);
    bob.write("store/ws/labels.csv", "a,2\n");
    commit_and_push(&bob, "store/ws", "relabel");
    alice.write("ws/labels.csv", "a,3\n");
    alice.write("ws/mine.txt", "mine\n");
    settle(&alice);
    json_in(&alice, "ws", &["commit", "-m", "my labels"], 0);
    let head = version_ids(&alice, "m")[0].clone();
    // Fetched first, so that what is compared below is only what the rebase would change.
    alice.ok(&["fetch"]);
    let log_before = reflog(&alice);
    let tree_before = snapshot_tree(&alice.path("ws"));

    let refused = json_in(&alice, "ws", &["pull", "m", "--rebase"], 4);
    let rebase = &refused["rebase"];
    assert_eq!(rebase["status"], "conflict", "{refused}");
    assert!(rebase["head"].is_null(), "{refused}");
    let conflicts = rebase["conflicts"].as_array().unwrap();
    assert_eq!(conflicts.len(), 1, "{refused}");
    assert_eq!(conflicts[0]["path"], "labels.csv");
    assert_eq!(conflicts[0]["reason"], "both-changed");
    assert_eq!(conflicts[0]["ours"], "modified");
    assert_eq!(conflicts[0]["theirs"], "modified");
    // Head, ref log and workspace untouched.
    assert_eq!(version_ids(&alice, "m")[0], head);
    assert_eq!(reflog(&alice), log_before);
    assert_eq!(snapshot_tree(&alice.path("ws")), tree_before);
    let status = json_in(&alice, "ws", &["status"], 0);
    assert_eq!(status["version"], head.as_str());

    // `dsv rebase` says the same, in words.
    assert_snapshot!(human_in(&alice, "ws", &["rebase", "origin/m"]), @"
    exit: 4
    --- stdout
    m and origin/m ([SHORT]) changed the same paths; nothing was changed:
      labels.csv  modified here, modified there
    --- stderr
    error: cannot rebase m onto origin/m: 1 path(s) changed on both sides

    hint: nothing was changed; choose a side and run it again: `dsv rebase origin/m --theirs` takes origin/m's version of every such path, `--ours` keeps yours (or per path: --theirs=PATH, --ours=PATH); or check out origin/m into a new directory (`dsv checkout origin/m DIR`), bring your changes there by hand, `dsv commit` there, then `dsv push`
    ");
    // A deletion against a change is a conflict too.
    std::fs::remove_file(alice.path("ws/other.txt")).unwrap();
    alice.write("ws/labels.csv", "a,2\n");
    settle(&alice);
    json_in(
        &alice,
        "ws",
        &["commit", "-m", "take theirs, drop other"],
        0,
    );
    bob.write("store/ws/other.txt", "o, edited\n");
    commit_and_push(&bob, "store/ws", "edit other");
    let refused = json_in(&alice, "ws", &["rebase", "origin/m"], 4);
    let conflicts = refused["conflicts"].as_array().unwrap();
    assert_eq!(conflicts.len(), 1, "{refused}");
    assert_eq!(conflicts[0]["path"], "other.txt");
    assert_eq!(conflicts[0]["ours"], "deleted");
}

#[test]
fn the_same_change_on_both_sides_merges_and_a_version_that_adds_nothing_is_dropped() {
    let (alice, bob, _) = team(&[("shared.txt", "v1\n")]);
    bob.write("store/ws/shared.txt", "v2\n");
    commit_and_push(&bob, "store/ws", "bump");
    // Alice makes the same change, then another one.
    alice.write("ws/shared.txt", "v2\n");
    settle(&alice);
    json_in(&alice, "ws", &["commit", "-m", "bump too"], 0);
    alice.write("ws/alice.txt", "mine\n");
    settle(&alice);
    json_in(&alice, "ws", &["commit", "-m", "add mine"], 0);
    let rebased = json_in(&alice, "ws", &["pull", "m", "--rebase"], 0)["rebase"].clone();
    assert_eq!(rebased["status"], "rebased", "{rebased}");
    let replayed = rebased["replayed"].as_array().unwrap();
    assert_eq!(replayed.len(), 2, "{rebased}");
    assert_eq!(replayed[0]["message"], "bump too");
    assert_eq!(replayed[0]["kept"], false, "{rebased}");
    assert!(replayed[0]["version"].is_null());
    assert_eq!(replayed[1]["message"], "add mine");
    assert_eq!(replayed[1]["kept"], true);
    let head = rebased["head"].as_str().unwrap();
    assert_eq!(replayed[1]["version"], head);
    let shown = alice.json(&["show", &format!("m@{head}")]);
    assert_eq!(shown["parent"], rebased["onto_version"], "{shown}");
    assert_eq!(
        std::fs::read_to_string(alice.path("ws/shared.txt")).unwrap(),
        "v2\n"
    );
    assert!(alice.path("ws/alice.txt").exists());
    alice.ok(&["push"]);
}

#[test]
fn several_local_versions_are_replayed_in_order_onto_the_remote_head() {
    let (alice, bob, _) = team(&[("base.txt", "base\n")]);
    bob.write("store/ws/bob.txt", "bob\n");
    commit_and_push(&bob, "store/ws", "bob's");
    for (message, path, content) in [
        ("one", "f1", "1\n"),
        ("two", "f1", "2\n"),
        ("three", "f2", "3\n"),
    ] {
        alice.write(&format!("ws/{path}"), content);
        settle(&alice);
        json_in(&alice, "ws", &["commit", "-m", message], 0);
    }
    let before = version_ids(&alice, "m");
    // From the store's root (no workspace there): the workspace stays where it was.
    alice.ok(&["fetch"]);
    let rebased = alice.json(&["rebase", "origin/m"]);
    assert_eq!(rebased["status"], "rebased", "{rebased}");
    assert!(rebased.get("workspace").is_none(), "{rebased}");
    let replayed = rebased["replayed"].as_array().unwrap();
    let messages: Vec<&str> = replayed
        .iter()
        .map(|r| r["message"].as_str().unwrap())
        .collect();
    assert_eq!(messages, ["one", "two", "three"]);
    let froms: Vec<&str> = replayed
        .iter()
        .map(|r| r["from"].as_str().unwrap())
        .collect();
    assert_eq!(froms, [&before[2], &before[1], &before[0]]);
    // The head's line: three, two, one, bob's, base, each new version's parent the one before.
    let log = alice.json(&["log", "m"]);
    let line: Vec<&str> = log
        .as_array()
        .unwrap()
        .iter()
        .take(5)
        .map(|v| v["message"].as_str().unwrap())
        .collect();
    assert_eq!(line, ["three", "two", "one", "bob's", "base"]);
    for (i, step) in replayed.iter().enumerate().skip(1) {
        let shown = alice.json(&["show", &format!("m@{}", step["version"].as_str().unwrap())]);
        assert_eq!(shown["parent"], replayed[i - 1]["version"], "{shown}");
    }
    // The head's files: everyone's.
    alice.ok(&["checkout", "m", "check"]);
    let files: Vec<String> = snapshot_tree(&alice.path("check")).into_keys().collect();
    assert_eq!(files, ["base.txt", "bob.txt", "f1", "f2"]);
    assert_eq!(
        std::fs::read_to_string(alice.path("check/f1")).unwrap(),
        "2\n"
    );
    // The workspace, left at the old line, has diverged from the head.
    let status = json_in(&alice, "ws", &["status"], 0);
    let heads = status["heads"].as_array().unwrap();
    assert_eq!(heads[0]["name"], "m", "{status}");
    assert_eq!(
        (heads[0]["ahead"].as_u64(), heads[0]["behind"].as_u64()),
        (Some(3), Some(4))
    );
    // Up to date now; a second rebase has nothing to do.
    let again = alice.json(&["rebase", "origin/m"]);
    assert_eq!(again["status"], "up-to-date", "{again}");
}

#[test]
fn a_workspace_with_uncommitted_changes_is_left_where_it_is() {
    let (alice, bob, _) = team(&[("a.txt", "a\n")]);
    bob.write("store/ws/b.txt", "b\n");
    commit_and_push(&bob, "store/ws", "bob's");
    alice.write("ws/c.txt", "c\n");
    settle(&alice);
    json_in(&alice, "ws", &["commit", "-m", "alice's"], 0);
    let old_head = version_ids(&alice, "m")[0].clone();
    alice.write("ws/a.txt", "edited, not committed\n");
    settle(&alice);
    let out = human_in(&alice, "ws", &["pull", "--rebase"]);
    // The first line (what was downloaded) aside.
    let (fetched, rest) = out.split_once("origin/m@").unwrap();
    let rest = rest.split_once('\n').unwrap().1;
    assert_snapshot!(format!("{fetched}{rest}"), @"
    exit: 0
    --- stdout
    replayed 1 local version(s) of m onto origin/m ([SHORT])
      [SHORT] -> [SHORT]  alice's
    m is now at [SHORT]; `dsv push` sends the new versions
    workspace [ROOT]/ws was left at m@[SHORT]: it has 1 uncommitted change(s) (`dsv status` lists them; `dsv checkout m [ROOT]/ws` moves it, keeping them where the new head did not change those paths; a commit there before that would replace the rebased head)
    --- stderr
    ");
    // The head moved; the workspace still holds the old head, with the edit.
    assert_ne!(version_ids(&alice, "m")[0], old_head);
    let status = json_in(&alice, "ws", &["status"], 0);
    assert_eq!(status["version"], old_head.as_str(), "{status}");
    assert!(!alice.path("ws/b.txt").exists());
    assert_eq!(
        std::fs::read_to_string(alice.path("ws/a.txt")).unwrap(),
        "edited, not committed\n"
    );
    // What the output advises: the checkout moves it and keeps the edit.
    alice.ok(&["checkout", "m", "ws"]);
    assert!(alice.path("ws/b.txt").exists());
    assert_eq!(
        std::fs::read_to_string(alice.path("ws/a.txt")).unwrap(),
        "edited, not committed\n"
    );
}

#[test]
fn status_says_when_the_workspace_is_behind_and_pull_moves_a_clean_one() {
    let (alice, bob, _) = team(&[("a.txt", "a\n")]);
    for (i, message) in ["b1", "b2"].iter().enumerate() {
        bob.write(&format!("store/ws/b{i}.txt"), "b\n");
        commit_and_push(&bob, "store/ws", message);
    }
    alice.ok(&["fetch"]);
    let status = json_in(&alice, "ws", &["status"], 0);
    let heads = status["heads"].as_array().unwrap();
    assert_eq!(heads.len(), 1, "{status}");
    assert_eq!(heads[0]["name"], "origin/m");
    assert_eq!(heads[0]["behind"], 2);
    assert_eq!(heads[0]["ahead"], 0);
    assert_snapshot!(human_in(&alice, "ws", &["status"]), @"
    exit: 0
    --- stdout
    Clean: [ROOT]/ws matches m@[SHORT]
    behind origin/m by 2 versions (`dsv pull m` brings them here)
    --- stderr
    ");
    // Pulled from the store's root: the head moves, the workspace does not, and says so.
    let pulled = alice.json(&["pull", "m"]);
    assert_eq!(pulled["head"], "moved", "{pulled}");
    assert!(pulled.get("workspace").is_none(), "{pulled}");
    let status = json_in(&alice, "ws", &["status"], 0);
    let heads = status["heads"].as_array().unwrap();
    let names: Vec<&str> = heads.iter().map(|h| h["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["m", "origin/m"], "{status}");
    assert!(heads.iter().all(|h| h["behind"] == 2));
    // Another version from Bob; a pull inside the clean workspace moves it.
    bob.write("store/ws/b3.txt", "b\n");
    commit_and_push(&bob, "store/ws", "b3");
    alice.ok(&["checkout", "m", "ws"]);
    let pulled = json_in(&alice, "ws", &["pull"], 0);
    assert_eq!(pulled["head"], "moved", "{pulled}");
    assert_eq!(pulled["workspace"]["status"], "moved", "{pulled}");
    assert!(alice.path("ws/b3.txt").exists());
    let status = json_in(&alice, "ws", &["status"], 0);
    assert_eq!(status["heads"].as_array().unwrap().len(), 0, "{status}");
    assert_eq!(status["version"], pulled["version"]);
}

#[test]
fn pull_without_a_dataset_outside_a_workspace_is_a_usage_error() {
    let (alice, _, _) = team(&[("a.txt", "a\n")]);
    let err = alice.fails(&["pull", "--rebase"], 2);
    assert!(err.contains("name the dataset"), "{err}");
    assert!(Path::new(&alice.path("ws")).is_dir());
}

#[test]
fn rebase_onto_an_unrelated_line_or_an_unknown_version_is_refused() {
    let env = TestEnv::new();
    env.write("a/x", "x\n");
    env.ok(&["commit", "a", "-d", "m"]);
    env.write("b/y", "y\n");
    env.ok(&["commit", "b", "-d", "other"]);
    let before = reflog(&env);
    let err = env.json_error(&["rebase", "other", "-d", "m"], 3);
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("have no version in common"),
        "{err}"
    );
    assert!(
        err["hints"][0].as_str().unwrap().contains("--dataset"),
        "{err}"
    );
    env.fails(&["rebase", "m@nosuchtag"], 3);
    // A mistyped --dataset names no dataset: refused, never made.
    let typo = env.json_error(&["rebase", "m", "-d", "mm"], 3);
    assert!(
        typo["message"]
            .as_str()
            .unwrap()
            .contains("unknown dataset \"mm\""),
        "{typo}"
    );
    assert!(env.json(&["ls"]).to_string().contains("\"other\""));
    assert!(!env.json(&["ls"]).to_string().contains("\"mm\""));
    // Onto its own head: nothing to do.
    let same = env.json(&["rebase", "m"]);
    assert_eq!(same["status"], "up-to-date", "{same}");
    assert_eq!(reflog(&env), before);
}

#[test]
fn a_directory_made_a_file_on_one_side_while_the_other_adds_into_it_is_a_conflict() {
    let (alice, bob, _) = team(&[("a/x", "x\n"), ("keep", "k\n")]);
    std::fs::remove_dir_all(bob.path("store/ws/a")).unwrap();
    bob.write("store/ws/a", "now a file\n");
    commit_and_push(&bob, "store/ws", "a is a file");
    alice.write("ws/a/new", "new\n");
    settle(&alice);
    json_in(&alice, "ws", &["commit", "-m", "add into a"], 0);
    let head = version_ids(&alice, "m")[0].clone();
    let refused = json_in(&alice, "ws", &["pull", "--rebase"], 4);
    let conflicts = refused["rebase"]["conflicts"].as_array().unwrap();
    assert_eq!(conflicts.len(), 1, "{refused}");
    assert_eq!(conflicts[0]["path"], "a");
    assert_eq!(conflicts[0]["reason"], "file-and-directory");
    assert_eq!(version_ids(&alice, "m")[0], head);
    assert!(alice.path("ws/a/new").exists());
}
