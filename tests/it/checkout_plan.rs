//! `dsv checkout --dry-run`: the checkout's plan, path by path, and nothing changed: not the
//! directory, not the store (no lock file, no fetched pack, no workspace recorded), not a
//! remote.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde_json::json;

use crate::common::{TestEnv, push_to_file_remote};

/// Everything under `dir`, byte for byte: path -> (kind, content or link target, mode).
/// Modification times are left out (reading a pack marks it used).
fn everything(dir: &Path) -> BTreeMap<String, (char, Vec<u8>, u32)> {
    let mut out = BTreeMap::new();
    for entry in walkdir::WalkDir::new(dir).min_depth(1).follow_links(false) {
        let entry = entry.unwrap();
        let path = entry
            .path()
            .strip_prefix(dir)
            .unwrap()
            .display()
            .to_string();
        let meta = entry.path().symlink_metadata().unwrap();
        let mode = meta.permissions().mode();
        let value = if meta.file_type().is_symlink() {
            let target = fs::read_link(entry.path()).unwrap();
            ('l', target.display().to_string().into_bytes(), mode)
        } else if meta.is_dir() {
            ('d', Vec::new(), mode)
        } else {
            ('f', fs::read(entry.path()).unwrap(), mode)
        };
        out.insert(path, value);
    }
    out
}

/// The paths whose snapshot differs between `before` and `after`.
fn changed(
    before: &BTreeMap<String, (char, Vec<u8>, u32)>,
    after: &BTreeMap<String, (char, Vec<u8>, u32)>,
) -> Vec<String> {
    let mut paths: Vec<String> = before
        .keys()
        .chain(after.keys())
        .filter(|p| before.get(*p) != after.get(*p))
        .cloned()
        .collect();
    paths.dedup();
    paths
}

/// A store with two versions of `ds` (v1: a, b, sub/c; v2: a changed, b gone, sub/c, d),
/// `ws` a workspace holding v2 with uncommitted changes (d edited, sub/c deleted, an
/// untracked file), and the versions pushed to a file remote `origin` (at `remote`).
fn scene() -> TestEnv {
    let env = TestEnv::new();
    env.write("ws/a", "one");
    env.write("ws/b", "two");
    env.write("ws/sub/c", "three");
    env.ok(&["commit", "ws", "--dataset", "ds", "-m", "v1", "--tag", "v1"]);
    env.write("ws/a", "one, changed");
    fs::remove_file(env.path("ws/b")).unwrap();
    env.write("ws/d", "four");
    env.ok(&["commit", "ws", "-m", "v2"]);
    push_to_file_remote(&env, "remote", "ds");
    env.write("ws/d", "four, edited");
    fs::remove_file(env.path("ws/sub/c")).unwrap();
    env.write("ws/untracked", "mine");
    env
}

#[test]
fn a_dry_run_prints_the_plan_and_changes_nothing_anywhere() {
    let env = scene();
    let before = everything(env.root());
    // Back to v1: a is written back (what v2 had: recoverable), b written, d deleted but
    // edited (a conflict), sub/c deleted by the user where v1 has what v2 had (carried
    // over), the untracked file left alone.
    let output = env.run(&["checkout", "--dry-run", "ds@v1", "ws", "--json"]);
    assert_eq!(output.status.code(), Some(4), "{output:?}");
    let plan: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        plan["paths"],
        json!([
            {"path": "a", "action": "replace"},
            {"path": "b", "action": "write"},
            {"path": "d", "action": "conflict"},
            {"path": "sub/c", "action": "carry"},
        ]),
        "{plan}"
    );
    assert_eq!(
        (&plan["write"], &plan["bytes_to_write"], &plan["delete"]),
        (&json!(2), &json!(6), &json!(1))
    );
    assert_eq!(
        (&plan["carried"], &plan["unchanged"]),
        (&json!(1), &json!(0))
    );
    assert_eq!(
        (&plan["conflicts"], &plan["refused"]),
        (&json!(1), &json!(true))
    );
    // With --force: d is deleted, sub/c written back; not refused.
    let forced = env.json(&["checkout", "--dry-run", "--force", "ds@v1", "ws"]);
    assert_eq!(
        forced["paths"],
        json!([
            {"path": "a", "action": "replace"},
            {"path": "b", "action": "write"},
            {"path": "d", "action": "delete"},
            {"path": "sub/c", "action": "write"},
        ]),
        "{forced}"
    );
    assert_eq!(forced["refused"], json!(false));
    // The human plan names the same.
    let human = env.run(&["checkout", "--dry-run", "ds@v1", "ws"]);
    let text = env.normalize(&format!(
        "exit: {}\n--- stdout\n{}--- stderr\n{}",
        human.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&human.stdout),
        String::from_utf8_lossy(&human.stderr)
    ));
    insta::assert_snapshot!(text, @"
    exit: 4
    --- stdout
    Would check out ds@[SHORT] into [ROOT]/ws: 3 files, 11 B
      write 2 (6 B), delete 1, 0 already up to date
      keep 1 uncommitted change(s) that this version does not touch
      replace     a
      write       b
      CONFLICT    d
      keep yours  sub/c
    would be refused: 1 path(s) with uncommitted changes in the way (--force overwrites them)
    nothing was changed (dry run)
    --- stderr
    ");
    // A directory that does not exist is planned as an empty one, and not made.
    let fresh = env.json(&["checkout", "--dry-run", "ds@v1", "new"]);
    assert_eq!(
        fresh["paths"],
        json!([
            {"path": "a", "action": "write"},
            {"path": "b", "action": "write"},
            {"path": "sub/c", "action": "write"},
        ])
    );
    assert!(!env.path("new").exists());
    // Workspace, store (catalog, packs, locks, ref log, temporaries) and remote: byte for byte.
    let after = everything(env.root());
    assert_eq!(changed(&before, &after), Vec::<String>::new());
    // The same checkout for real changes them (the snapshot sees a checkout).
    env.ok(&["checkout", "--force", "ds@v1", "ws"]);
    assert!(!changed(&before, &everything(env.root())).is_empty());
}

#[test]
fn a_dry_run_of_a_remote_revision_asks_the_remote_nothing() {
    let env = scene();
    // The remote is gone: a fetch would fail. The plan resolves origin/ds from the refs this
    // store recorded when it pushed.
    fs::rename(env.path("remote"), env.path("moved")).unwrap();
    let before = everything(env.root());
    let plan = env.json(&["checkout", "--dry-run", "origin/ds", "elsewhere"]);
    assert_eq!(plan["dataset"], json!("ds"));
    assert_eq!(plan["write"], json!(3), "{plan}");
    assert_eq!(
        changed(&before, &everything(env.root())),
        Vec::<String>::new()
    );
    // A checkout for real asks the remote, which holds no ref now.
    let refused = env.fails(&["checkout", "origin/ds", "elsewhere"], 3);
    assert!(refused.contains("unknown revision"), "{refused}");
}

#[test]
fn a_dry_run_refuses_what_the_checkout_would_refuse_before_its_plan() {
    let env = TestEnv::new();
    // A file at the longest path the system opens (4095 bytes), below `data`.
    let root = fs::canonicalize(env.root()).unwrap().join("data");
    let component = "a".repeat(255);
    let mut room = 4095 - root.as_os_str().len();
    let mut relative = Vec::new();
    while room > 1 + 255 {
        relative.push(component.clone());
        room -= 1 + 255;
    }
    relative.push("f".repeat(room - 1));
    let file = root.join(relative.join("/"));
    fs::create_dir_all(file.parent().unwrap()).unwrap();
    fs::write(&file, "at the longest path\n").unwrap();
    env.ok(&["commit", "data", "--dataset", "long"]);
    // Into a directory with a longer name: the checkout refuses it, and so does its plan.
    fs::create_dir(env.path("a-longer-directory")).unwrap();
    let before = everything(env.root());
    let error = env.json_error(&["checkout", "--dry-run", "long", "a-longer-directory"], 6);
    assert!(
        error["causes"][0]
            .as_str()
            .is_some_and(|c| c.contains("File name too long")),
        "{error}"
    );
    assert_eq!(
        changed(&before, &everything(env.root())),
        Vec::<String>::new()
    );
}
