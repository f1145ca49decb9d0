//! Plans of the sync operations (issue 38): `dsv copy --dry-run` and `dsv pull --dry-run`
//! print what the operation would do and change nothing: no byte written to the
//! destination remote, no ref moved, no pack or ref recorded, no file of a workspace touched.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::{TestEnv, pseudo_random};

/// Every file under `dir` (recursively), with its bytes, except those `skip` names.
fn snapshot(dir: &Path, skip: &dyn Fn(&Path) -> bool) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(dir: &Path, skip: &dyn Fn(&Path) -> bool, into: &mut BTreeMap<PathBuf, Vec<u8>>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if skip(&path) {
                continue;
            }
            if path.is_dir() {
                walk(&path, skip, into);
            } else {
                into.insert(path.clone(), std::fs::read(&path).unwrap());
            }
        }
    }
    let mut into = BTreeMap::new();
    walk(dir, skip, &mut into);
    into
}

/// A store with remotes `src` and `dst` (directories): `ds`'s first version on both, its
/// second (tagged `v2`, with a new file of its own) on `src` only.
fn two_remotes() -> TestEnv {
    let env = TestEnv::new();
    for name in ["src", "dst"] {
        let url = format!("file://{}/{name}", env.root().display());
        env.ok(&["remote", "add", name, &url]);
    }
    env.write("d/a.bin", pseudo_random(300_000, 1));
    env.write("d/same.txt", "in every version\n");
    env.ok(&["commit", "d", "-d", "ds", "-m", "one", "-q"]);
    env.ok(&["push", "-q", "--remote", "src"]);
    env.ok(&["push", "-q", "--remote", "dst"]);
    env.write("d/b.bin", pseudo_random(400_000, 2));
    env.ok(&["commit", "d", "-d", "ds", "-m", "two", "-q"]);
    env.ok(&["tag", "ds", "v2"]);
    env.ok(&["push", "-q", "--remote", "src"]);
    env
}

/// `copy --dry-run` writes nothing to DST and moves no ref; what it says a copy does (each
/// ref's status, each SRC pack whole or by frames, the counts and bytes) is what the copy
/// then does.
#[test]
fn copy_dry_run_writes_nothing_and_plans_what_the_copy_does() {
    let env = two_remotes();
    let dst = env.path("dst");
    let before = snapshot(&dst, &|_| false);
    let planned = env.json(&["copy", "ds", "--from", "src", "--to", "dst", "--dry-run"]);
    assert_eq!(planned["dry_run"], true, "{planned:#}");
    assert_eq!(snapshot(&dst, &|_| false), before, "a dry run wrote to dst");
    let statuses = |report: &Value| -> Vec<(Value, Value, Value)> {
        report["refs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["tag"].clone(), r["version"].clone(), r["status"].clone()))
            .collect()
    };
    assert_eq!(
        statuses(&planned)
            .iter()
            .map(|(tag, _, status)| (tag.clone(), status.clone()))
            .collect::<Vec<_>>(),
        vec![
            (Value::Null, "updated".into()),
            ("v2".into(), "created".into())
        ],
        "{planned:#}"
    );
    assert_eq!(planned["planned"]["versions"], 1, "{planned:#}");
    assert!(
        planned["planned"]["bytes"].as_u64().unwrap() > 400_000,
        "{planned:#}"
    );
    assert!(
        !planned["packs"].as_array().unwrap().is_empty(),
        "{planned:#}"
    );
    assert_eq!(planned["transfer"]["bytes"], 0, "{planned:#}");
    // The refs stay: a dry run again plans the same.
    let again = env.json(&["copy", "ds", "--from", "src", "--to", "dst", "--dry-run"]);
    assert_eq!(statuses(&again), statuses(&planned));
    let copied = env.json(&["copy", "ds", "--from", "src", "--to", "dst"]);
    assert_eq!(copied["dry_run"], false, "{copied:#}");
    assert_eq!(statuses(&copied), statuses(&planned));
    assert_eq!(copied["packs"], planned["packs"]);
    for field in [
        "versions",
        "objects",
        "whole_packs",
        "partial_packs",
        "frames",
        "bytes",
    ] {
        assert_eq!(
            copied["planned"][field], planned["planned"][field],
            "{field}: {copied:#}"
        );
    }
    assert_ne!(snapshot(&dst, &|_| false), before, "the copy wrote nothing");
    // Now in place: the plan says so.
    let done = env.json(&["copy", "ds", "--from", "src", "--to", "dst", "--dry-run"]);
    assert_eq!(done["planned"]["objects"], 0, "{done:#}");
    assert!(
        statuses(&done).iter().all(|(_, _, s)| s == "up-to-date"),
        "{done:#}"
    );
}

/// The human output of `copy --dry-run`, ids and sizes normalized.
#[test]
fn copy_dry_run_in_text() {
    let env = two_remotes();
    let out = env.ok(&["copy", "ds", "--from", "src", "--to", "dst", "--dry-run"]);
    let text = regex::Regex::new(r"\d+(\.\d+)? (B|KiB|MiB)")
        .unwrap()
        .replace_all(&env.normalize(&out), "[SIZE]")
        .into_owned();
    insta::assert_snapshot!(text, @r"
    dst/ds     [SHORT]..[SHORT]  updated
    dst/ds@v2  [SHORT]                created
    dst lacks 9 objects (1 version): would copy 1 pack whole and 0 frames from 0 partly needed packs ([SIZE])
    nothing written, no ref moved (--dry-run); 4 requests to dst, 3 requests to src
    ");
}

/// The store and workspace files a dry run must leave as they are: everything under `root`
/// but SQLite's shared-memory and write-ahead files (a connection's open and close create and
/// delete them; what a write puts there reaches `catalog.db` when the connection closes).
fn store_and_workspace(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    snapshot(root, &|path| {
        let name = path.file_name().unwrap().to_string_lossy();
        name.ends_with("-shm") || name.ends_with("-wal")
    })
}

/// `pull --dry-run` downloads nothing and changes nothing (no pack, no ref, no catalog row,
/// no workspace file; the remote only read), before and after this store has the new
/// version's metadata; what it then plans (the head, the tags, the chunks) is what the pull
/// does.
#[test]
fn pull_dry_run_fetches_nothing_and_plans_what_the_pull_does() {
    let alice = TestEnv::new();
    let bob = TestEnv::new();
    let url = format!("file://{}/remote", alice.root().display());
    alice.ok(&["remote", "add", "origin", &url]);
    bob.ok(&["remote", "add", "origin", &url]);
    alice.write("d/a.bin", pseudo_random(300_000, 1));
    alice.ok(&["commit", "d", "-d", "ds", "-m", "one", "-q"]);
    alice.ok(&["push", "-q"]);
    bob.ok(&["pull", "ds", "-q"]);
    bob.ok(&["checkout", "ds", "ws", "-q"]);
    alice.write("d/b.bin", pseudo_random(500_000, 2));
    alice.ok(&["commit", "d", "-d", "ds", "-m", "two", "-q"]);
    alice.ok(&["tag", "ds", "v2"]);
    alice.ok(&["push", "-q"]);
    let remote = snapshot(&alice.path("remote"), &|_| false);
    // A read first, so that the catalog holds every write (its write-ahead log checkpointed).
    bob.ok(&["log", "ds"]);
    let before = store_and_workspace(bob.root());

    // The new version's metadata is not here: the head's fate and the chunks wait for it.
    let planned = bob.json(&["pull", "ds", "--dry-run"]);
    assert_eq!(planned["dry_run"], true, "{planned:#}");
    let plan = &planned["plan"];
    assert_eq!(plan["ref_cache"], "refresh", "{planned:#}");
    assert_eq!(plan["metadata_here"], false, "{planned:#}");
    assert!(plan["head"].is_null(), "{planned:#}");
    assert!(plan["missing_objects"].is_null(), "{planned:#}");
    assert_eq!(plan["tags"][0]["tag"], "v2", "{planned:#}");
    assert_eq!(plan["tags"][0]["action"], "copy", "{planned:#}");
    assert_eq!(planned["transfer"]["bytes"], 0, "{planned:#}");
    assert_eq!(
        store_and_workspace(bob.root()),
        before,
        "a dry run changed bob's store"
    );
    assert_eq!(snapshot(&alice.path("remote"), &|_| false), remote);

    // With the metadata here (a fetch), the plan is whole.
    bob.ok(&["fetch", "-q"]);
    let log = bob.json(&["log", "ds"]);
    let before = store_and_workspace(bob.root());
    let planned = bob.json(&["pull", "ds", "--dry-run"]);
    let plan = &planned["plan"];
    assert_eq!(plan["ref_cache"], "hit", "{planned:#}");
    assert_eq!(plan["metadata_here"], true, "{planned:#}");
    assert_eq!(plan["head"], "moved", "{planned:#}");
    assert_eq!(planned["head"], "moved", "{planned:#}");
    assert!(plan["missing_objects"].as_u64().unwrap() > 0, "{planned:#}");
    assert!(
        plan["missing_bytes"].as_u64().unwrap() > 400_000,
        "{planned:#}"
    );
    assert_eq!(plan["unlocated_objects"], 0, "{planned:#}");
    // As a pull, a pattern that selects nothing is an error.
    bob.json_error(&["pull", "ds", "--dry-run", "--include", "nomatch/**"], 3);
    assert_eq!(
        store_and_workspace(bob.root()),
        before,
        "a dry run changed bob's store"
    );
    assert_eq!(bob.json(&["log", "ds"]), log, "a dry run moved the head");
    assert_eq!(snapshot(&alice.path("remote"), &|_| false), remote);

    let pulled = bob.json(&["pull", "ds"]);
    assert_eq!(pulled["dry_run"], false, "{pulled:#}");
    assert_eq!(pulled["head"], "moved", "{pulled:#}");
    assert_eq!(pulled["version"], planned["version"], "{pulled:#}");
    assert!(
        pulled["transfer"]["bytes"].as_u64().unwrap() >= plan["missing_bytes"].as_u64().unwrap()
    );
    assert_eq!(
        bob.json(&["log", "ds"])[0]["tags"][0],
        "v2",
        "the tag was not copied"
    );
    // All here now: nothing to download.
    let again = bob.json(&["pull", "ds", "--dry-run"]);
    assert_eq!(again["plan"]["head"], "up-to-date", "{again:#}");
    assert_eq!(again["plan"]["missing_objects"], 0, "{again:#}");
    assert_eq!(again["plan"]["tags"][0]["action"], "kept", "{again:#}");
}

/// `pull NAME~N --rebase --dry-run` on a store that lacks the remote's metadata: the
/// revision is resolved once the metadata is fetched (as the rebase plan needs it anyway),
/// not refused; the head does not move.
#[test]
fn pull_rebase_dry_run_resolves_an_ancestor_the_store_does_not_hold_yet() {
    let alice = TestEnv::new();
    let bob = TestEnv::new();
    let url = format!("file://{}/remote", alice.root().display());
    alice.ok(&["remote", "add", "origin", &url]);
    bob.ok(&["remote", "add", "origin", &url]);
    alice.write("d/a.bin", pseudo_random(100_000, 3));
    alice.ok(&["commit", "d", "-d", "ds", "-m", "one", "-q"]);
    alice.write("d/b.bin", pseudo_random(100_000, 4));
    alice.ok(&["commit", "d", "-d", "ds", "-m", "two", "-q"]);
    alice.ok(&["push", "-q"]);
    let first = alice.json(&["log", "ds"])[1]["id"].clone();
    let planned = bob.json(&["pull", "ds~1", "--rebase", "--dry-run"]);
    assert_eq!(planned["dry_run"], true, "{planned:#}");
    assert_eq!(planned["version"], first, "{planned:#}");
    // Nothing moved: bob still has no head for ds (the versions fetched are off its line).
    let log = bob.json(&["log", "ds"]);
    let versions = log.as_array().unwrap();
    assert!(
        versions.iter().all(|v| v["off_head_line"] == true),
        "{log:#}"
    );
}
