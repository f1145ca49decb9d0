//! Guards against easy mistakes: a commit of a subdirectory of a workspace into the same
//! dataset, a store created inside another store's tree or workspace, a mount over files, and
//! the author of a commit made without `$USER`. Each refusal says what went wrong and what to
//! do, exits 3, changes nothing, and (where offered) gives way to `--force`.

use std::fs;

use insta::assert_snapshot;

use crate::common::{TestEnv, snapshot_tree};

/// Exit code, stdout and stderr of `dsv ARGS` run in `env`'s `dir`, normalized.
fn human_in(env: &TestEnv, dir: &str, args: &[&str]) -> String {
    let out = env
        .dsv()
        .current_dir(env.path(dir))
        .args(args)
        .output()
        .unwrap();
    env.normalize(&format!(
        "exit: {}\n--- stdout\n{}--- stderr\n{}",
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}

/// Checked before FUSE is touched, so this runs with or without FUSE.
#[test]
fn mount_on_a_directory_that_is_not_empty_is_refused() {
    let env = TestEnv::new();
    env.write("data/a.txt", "a");
    env.ok(&["commit", "data", "-d", "d"]);
    env.write("mnt/keep.txt", "mine");
    let before = snapshot_tree(&env.path("mnt"));
    assert_snapshot!(human_in(&env, ".", &["mount", "d", "mnt"]), @r"
    exit: 3
    --- stdout
    --- stderr
    error: cannot mount on mnt: it is not empty (a mount would hide its files): mount on an empty directory

    hint: mount on an existing, empty directory that nothing is mounted on (`mkdir -p DIR`); `fusermount3 -u DIR` releases a mount that is there, a dead one too
    ");
    let error = env.json_error(&["mount", "d", "mnt"], 3);
    assert_eq!(error["kind"], "user", "{error}");
    // A hidden file counts as well.
    fs::remove_file(env.path("mnt/keep.txt")).unwrap();
    env.write("mnt/.hidden", "x");
    env.fails(&["mount", "d", "mnt"], 3);
    fs::remove_file(env.path("mnt/.hidden")).unwrap();
    env.write("mnt/keep.txt", "mine");
    assert_eq!(snapshot_tree(&env.path("mnt")), before);
}
