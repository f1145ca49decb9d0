//! Working like git (issue 12): commit and status from inside a workspace, a commit's parent
//! is the workspace's version, the teamwork loop through a remote, `reset`, tags, `rename`,
//! `rm NAME`, `.dsvignore` / `--exclude`, and hints that fit the mistake.

use serde_json::Value;

use crate::common::{TestEnv, settle, version_ids};

/// `dsv ARGS --json` run in `dir` (relative to the env's root); the parsed stdout.
fn json_in(env: &TestEnv, dir: &str, args: &[&str]) -> Value {
    let out = env
        .dsv()
        .current_dir(env.path(dir))
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "dsv {args:?} in {dir} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn commit_and_status_need_no_arguments_inside_a_workspace() {
    let env = TestEnv::new();
    env.write("ws/a.txt", "a\n");
    let first = env.json(&["commit", "ws", "-d", "bgi"]);
    assert_eq!(first["new_dataset"], true, "{first}");
    env.write("ws/sub/b.txt", "b\n");
    settle(&env);
    // From a subdirectory: the workspace's root and dataset.
    let status = json_in(&env, "ws/sub", &["status"]);
    assert_eq!(
        status["dir"],
        env.path("ws").canonicalize().unwrap().to_str().unwrap()
    );
    assert_eq!(status["changes"].as_array().unwrap().len(), 1, "{status}");
    let second = json_in(&env, "ws/sub", &["commit", "-m", "add b"]);
    assert_eq!(second["created"], true);
    assert_eq!(second["new_dataset"], false);
    assert_eq!(second["dataset"], "bgi");
    assert_eq!(second["parent"], first["version"]);
    assert_eq!(second["files"], 2);
    // Outside any workspace: no guess.
    let err = env.json_error(&["commit"], 3);
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("is not a workspace"),
        "{err}"
    );
    // A directory never committed needs the dataset's name.
    env.write("other/x", "x");
    let err = env.json_error(&["commit", "other"], 3);
    assert!(
        err["hints"][0].as_str().unwrap().contains("-d NAME"),
        "{err}"
    );
    // -d still commits the workspace to another (new) dataset.
    let other = json_in(&env, "ws", &["commit", "-d", "bgi-copy"]);
    assert_eq!(other["new_dataset"], true);
    assert_eq!(other["parent"], Value::Null);
}

#[test]
fn a_commit_descends_from_the_workspace_version_and_the_left_line_stays_in_the_log() {
    let env = TestEnv::new();
    env.write("ws/a", "1");
    let v1 = env.json(&["commit", "ws", "-d", "m"])["version"].clone();
    env.write("ws/b", "2");
    settle(&env);
    let v2 = env.json(&["commit", "ws", "-d", "m"])["version"].clone();
    // An older version checked out elsewhere, changed and committed: its parent is v1.
    env.ok(&["checkout", "m~1", "old"]);
    env.write("old/c", "3");
    settle(&env);
    let v3 = json_in(&env, "old", &["commit"]);
    assert_eq!(v3["parent"], v1);
    assert_eq!(v3["replaced_head"], v2);
    let log = env.json(&["log", "m"]);
    let ids: Vec<&Value> = log.as_array().unwrap().iter().map(|v| &v["id"]).collect();
    assert_eq!(ids, [&v3["version"], &v1, &v2]);
    assert_eq!(log[2]["off_head_line"], true);
    assert!(log[0].get("off_head_line").is_none());
    // Nothing changed against the workspace's own version: nothing recorded.
    let again = json_in(&env, "old", &["commit"]);
    assert_eq!(again["created"], false);
    // An unchanged workspace of a version off the head's line moves nothing: no head
    // replaced (the head is still v3).
    let unchanged = json_in(&env, "ws", &["commit"]);
    assert_eq!(unchanged["created"], false);
    assert_eq!(unchanged["replaced_head"], Value::Null, "{unchanged}");
    assert_eq!(env.json(&["log", "m"])[0]["id"], v3["version"]);
    // A change committed there does: the human note names the left head and how to return
    // to it.
    env.write("ws/d", "4");
    settle(&env);
    let out = env
        .dsv()
        .current_dir(env.path("ws"))
        .arg("commit")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("does not descend from"), "{stderr}");
    assert!(stderr.contains("dsv reset m"), "{stderr}");
}

#[test]
fn reset_moves_the_head_anywhere_and_loses_nothing() {
    let env = TestEnv::new();
    env.write("ws/a", "1");
    env.ok(&["commit", "ws", "-d", "m", "-t", "v1"]);
    env.write("ws/b", "2");
    settle(&env);
    env.ok(&["commit", "ws", "-d", "m"]);
    let before = version_ids(&env, "m");
    let reset = env.json(&["reset", "m", "v1"]);
    assert_eq!(reset["from"].as_str().unwrap(), before[0]);
    assert_eq!(reset["to"].as_str().unwrap(), before[1]);
    assert_eq!(env.json(&["show", "m"])["id"].as_str().unwrap(), before[1]);
    // The left version is still listed, and reset brings it back.
    let after = version_ids(&env, "m");
    assert_eq!(after, [before[1].clone(), before[0].clone()]);
    // The ref log records the move: a catalog rebuilt from it has the same head.
    env.ok(&["repair"]);
    assert_eq!(env.json(&["show", "m"])["id"].as_str().unwrap(), before[1]);
    env.ok(&["reset", "m", &before[0][..12]]);
    assert_eq!(
        env.json(&["show", "m@HEAD"])["id"].as_str().unwrap(),
        before[0]
    );
    // A removed version is refused; a revision of another dataset too.
    env.ok(&["rm", "m@v1", "--force"]);
    let err = env.json_error(&["reset", "m", &before[1][..12]], 3);
    assert!(
        err["message"].as_str().unwrap().contains("was removed"),
        "{err}"
    );
    env.write("x/a", "x");
    env.ok(&["commit", "x", "-d", "other"]);
    env.fails(&["reset", "m", "other@latest"], 3);
}

#[test]
fn the_teamwork_loop_closes_through_a_remote() {
    let a = TestEnv::new();
    a.write("ws/x", "1");
    a.ok(&["commit", "ws", "-d", "m"]);
    let (_, url) = crate::common::push_to_file_remote(&a, "remote", "m");
    // B clones, commits, pushes.
    let b = TestEnv::bare();
    b.ok(&["clone", &url, "store"]);
    b.dsv()
        .current_dir(b.path("store"))
        .args(["checkout", "m", "ws"])
        .assert()
        .success();
    b.write("store/ws/y", "2");
    settle(&b);
    b.dsv()
        .current_dir(b.path("store/ws"))
        .args(["commit"])
        .assert()
        .success();
    b.dsv()
        .current_dir(b.path("store/ws"))
        .args(["push"])
        .assert()
        .success();
    // A committed too: the push is refused, the pull keeps A's head.
    a.write("ws/z", "3");
    settle(&a);
    a.ok(&["commit", "ws"]);
    let err = a.json_error(&["push"], 4);
    assert!(
        err["message"].as_str().unwrap().contains("pull first"),
        "{err}"
    );
    let pulled = a.json(&["pull", "m"]);
    assert_eq!(pulled["head"], "diverged", "{pulled}");
    let theirs = pulled["version"].as_str().unwrap().to_string();
    let advice = a.ok(&["pull", "m"]);
    assert!(
        advice.contains(&format!("dsv checkout m@{}", &theirs[..12])),
        "{advice}"
    );
    // Doing what it says: check out theirs, bring the change, commit, push.
    a.ok(&["checkout", "origin/m", "merged"]);
    std::fs::copy(a.path("ws/z"), a.path("merged/z")).unwrap();
    settle(&a);
    let combined = json_in(&a, "merged", &["commit", "-m", "combine"]);
    assert_eq!(combined["parent"].as_str().unwrap(), theirs);
    let pushed = a.json(&["push"]);
    assert_eq!(pushed["refs"][0]["status"], "updated", "{pushed}");
    // An older version of that line is behind the remote's head: said so, not "pull first".
    let err = a.json_error(&["push", "m@latest~1"], 4);
    let message = err["message"].as_str().unwrap();
    assert!(message.contains("is behind the head"), "{err}");
    assert!(
        err["hints"][0].as_str().unwrap().contains("--force"),
        "{err}"
    );
}

#[test]
fn tags_are_listed_and_deleted_and_head_is_an_alias_of_latest() {
    let env = TestEnv::new();
    env.write("ws/a", "1");
    env.ok(&["commit", "ws", "-d", "m", "-t", "v1"]);
    env.write("ws/b", "22");
    settle(&env);
    env.ok(&["commit", "ws", "-d", "m", "-t", "v2"]);
    let tags = env.json(&["tag", "--list", "m"]);
    let names: Vec<&str> = tags
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["tag"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["v1", "v2"]);
    let deleted = env.json(&["tag", "-d", "m@v1"]);
    assert_eq!(deleted["tag"], "v1");
    assert_eq!(env.json(&["tag", "-l"]).as_array().unwrap().len(), 1);
    // The ref log records the deletion: a catalog rebuilt from it does not bring it back.
    env.ok(&["repair"]);
    assert_eq!(env.json(&["tag", "-l"]).as_array().unwrap().len(), 1);
    env.fails(&["show", "m@v1"], 3);
    env.fails(&["tag", "-d", "m@v1"], 3);
    env.fails(&["tag", "m"], 2);
    env.fails(&["tag", "m", "HEAD"], 3);
    assert_eq!(
        env.json(&["show", "m@HEAD"])["id"],
        env.json(&["show", "m@latest"])["id"]
    );
    assert_eq!(
        env.json(&["show", "m@HEAD~1"])["id"],
        env.json(&["show", "m~1"])["id"]
    );
    let oneline = env.ok(&["log", "m", "--oneline"]);
    let lines: Vec<&str> = oneline.lines().collect();
    assert_eq!(lines.len(), 2, "{oneline}");
    assert!(lines[0].contains("(head, tag: v2)"), "{oneline}");
    let stat = env.ok(&["diff", "m~1", "m", "--stat"]);
    assert!(stat.contains(" b | - → 2 B"), "{stat}");
    assert!(
        stat.ends_with("1 file changed: 1 added, 0 modified, 0 deleted; 0 B → 2 B\n"),
        "{stat}"
    );
}

#[test]
fn a_long_diff_ends_with_a_summary_line() {
    let env = TestEnv::new();
    env.write("ws/keep", "k");
    env.ok(&["commit", "ws", "-d", "m"]);
    for i in 0..25 {
        env.write(&format!("ws/f{i:02}"), "x");
    }
    settle(&env);
    env.ok(&["commit", "ws", "-d", "m"]);
    let diff = env.ok(&["diff", "m"]);
    assert!(
        diff.ends_with("25 files changed: 25 added, 0 modified, 0 deleted; 0 B → 25 B\n"),
        "{diff}"
    );
}

#[test]
fn removed_datasets_leave_ls_and_datasets_can_be_renamed() {
    let env = TestEnv::new();
    env.write("ws/a", "1");
    env.ok(&["commit", "ws", "-d", "mnsit", "-t", "v1"]);
    env.write("tmp/a", "2");
    env.ok(&["commit", "tmp", "-d", "scratch"]);
    env.ok(&["workspace", "forget", "tmp"]);
    env.ok(&["rm", "scratch", "--force"]);
    let names = |env: &TestEnv| -> Vec<String> {
        env.json(&["ls"])
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(names(&env), ["mnsit"]);
    // Rename: versions, tags and the workspace follow.
    env.ok(&["rename", "mnsit", "mnist"]);
    assert_eq!(names(&env), ["mnist"]);
    assert_eq!(env.json(&["tag", "-l", "mnist"])[0]["tag"], "v1");
    env.write("ws/b", "3");
    settle(&env);
    let next = env.json(&["commit", "ws"]);
    assert_eq!(next["dataset"], "mnist");
    assert_eq!(next["new_dataset"], false);
    assert_eq!(version_ids(&env, "mnist").len(), 2);
    let err = env.json_error(&["show", "mnsit"], 3);
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("did you mean mnist?"),
        "{err}"
    );
    // Onto a name in use: refused, nothing changed.
    env.write("o/a", "o");
    env.ok(&["commit", "o", "-d", "other"]);
    env.fails(&["rename", "other", "mnist"], 3);
    assert_eq!(names(&env), ["mnist", "other"]);
    // The renamed names survive a repair from the ref log.
    env.ok(&["repair"]);
    assert_eq!(env.json(&["tag", "-l", "mnist"])[0]["tag"], "v1");
    assert_eq!(env.json(&["show", "mnist"])["id"], next["version"]);
}

#[test]
fn dsvignore_and_exclude_leave_paths_out() {
    let env = TestEnv::new();
    env.write("ws/a", "a");
    env.write("ws/x.tmp", "t");
    env.write("ws/cache/c", "c");
    env.write("ws/sub/s.tmp", "s");
    env.write("ws/sub/keep.tmp", "k");
    env.write("ws/logs/run.log", "l");
    env.write("ws/.dsvignore", "*.tmp\ncache/\n");
    env.write("ws/sub/.dsvignore", "!keep.tmp\n");
    env.ok(&["commit", "ws", "-d", "m", "--exclude", "logs/"]);
    let files: Vec<String> = env
        .json(&["ls", "m"])
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        files,
        [".dsvignore", "a", "sub", "sub/.dsvignore", "sub/keep.tmp"]
    );
    // Ignored files are no change to status, and checkout leaves them alone.
    env.write("ws/y.tmp", "new");
    settle(&env);
    let status = env.json(&["status", "ws"]);
    let changed: Vec<&str> = status["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap())
        .collect();
    assert_eq!(changed, ["logs/run.log"]);
    env.ok(&["checkout", "m", "ws", "--force"]);
    assert!(env.path("ws/y.tmp").exists() && env.path("ws/cache/c").exists());
}

#[test]
fn checkout_never_overwrites_an_ignored_file_holding_other_content() {
    let env = TestEnv::new();
    env.write("ws/a.tmp", "1");
    env.write("ws/k", "k");
    env.ok(&["commit", "ws", "-d", "m"]);
    settle(&env);
    // Ignored from now on, and changed: no version holds "2".
    env.write("ws/.dsvignore", "*.tmp\n");
    env.write("ws/a.tmp", "2");
    env.ok(&["commit", "ws"]);
    assert!(
        env.json(&["status", "ws"])["changes"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    // The old version would write a.tmp over it: refused as for any untracked file.
    env.fails(&["checkout", "m~1", "ws"], 4);
    assert_eq!(std::fs::read_to_string(env.path("ws/a.tmp")).unwrap(), "2");
}

#[test]
fn hints_fit_the_mistake() {
    let env = TestEnv::new();
    env.write("ws/a", "1");
    env.write("ws/d/b", "2");
    env.ok(&["commit", "ws", "-d", "mnist", "-t", "v1"]);
    let hint = |args: &[&str], code: i32| -> String {
        let err = env.json_error(args, code);
        format!("{} | {}", err["message"], err["hints"])
    };
    assert!(hint(&["show", "mnist:v1"], 3).contains("did you mean mnist@v1?"));
    assert!(hint(&["show", "mnist@head"], 3).contains("mnist@latest"));
    assert!(hint(&["show", "mnist@ab"], 3).contains("at least 4 hex digits"));
    assert!(hint(&["log", "mnsit"], 3).contains("did you mean mnist?"));
    assert!(hint(&["commit", "nope", "-d", "x"], 3).contains("does not exist"));
    env.write("file.bin", "x");
    assert!(hint(&["commit", "file.bin", "-d", "x"], 3).contains("dsv import"));
    assert!(hint(&["cat", "mnist:d"], 3).contains("dsv ls mnist@latest:d"));
    assert!(
        hint(&["checkout", "mnist", "part", "--include", "nothing/**"], 3).contains("nothing/**")
    );
    // rm: the hint matches the reason.
    env.write("ws2/a", "other");
    env.ok(&["commit", "ws2", "-d", "mnist"]);
    env.ok(&["workspace", "forget", "ws"]);
    let tagged = hint(&["rm", "mnist@v1"], 3);
    assert!(
        tagged.contains("--force") && tagged.contains("dsv tag -d mnist@v1"),
        "{tagged}"
    );
    assert!(!tagged.contains("unpin"), "{tagged}");
    env.ok(&["checkout", "mnist@v1", "ws3"]);
    let held = hint(&["rm", "mnist@v1", "--force"], 3);
    assert!(held.contains("workspace forget"), "{held}");
    assert!(!held.contains("unpin"), "{held}");
    let head = hint(&["rm", "mnist@latest"], 3);
    assert!(
        head.contains("dsv rm mnist") && head.contains("dsv reset"),
        "{head}"
    );
    env.ok(&["pin", "mnist"]);
    assert!(hint(&["rm", "mnist"], 3).contains("unpin"));
}

#[test]
fn a_local_path_is_a_remote_url_and_an_unmatched_pull_glob_is_an_error() {
    let env = TestEnv::new();
    env.write("ws/train/a", "1");
    env.ok(&["commit", "ws", "-d", "m"]);
    std::fs::create_dir(env.path("remote")).unwrap();
    let added = env.json(&["remote", "add", "origin", "./remote"]);
    let url = added["url"].as_str().unwrap().to_string();
    assert_eq!(url, format!("file://{}", env.path("remote").display()));
    env.ok(&["push"]);
    let other = TestEnv::bare();
    other.ok(&["clone", env.path("remote").to_str().unwrap(), "c"]);
    // `pull NAME` of a name the remote lacks suggests a command that works.
    let unknown = other
        .dsv()
        .current_dir(other.path("c"))
        .args(["pull", "nosuch"])
        .output()
        .unwrap();
    assert_eq!(unknown.status.code(), Some(3));
    let hint = String::from_utf8_lossy(&unknown.stderr);
    assert!(hint.contains("`dsv fetch --remote origin` lists"), "{hint}");
    other
        .dsv()
        .current_dir(other.path("c"))
        .args(["fetch", "--remote", "origin"])
        .assert()
        .success();
    let err = other
        .dsv()
        .current_dir(other.path("c"))
        .args(["pull", "m", "--include", "tarin/**", "--json"])
        .output()
        .unwrap();
    assert_eq!(err.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&err.stdout);
    assert!(stderr.contains("tarin/**"), "{stderr}");
    other
        .dsv()
        .current_dir(other.path("c"))
        .args(["pull", "m", "--include", "train/**"])
        .assert()
        .success();
}
