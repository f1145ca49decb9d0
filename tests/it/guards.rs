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

fn workspace_paths(env: &TestEnv) -> Vec<String> {
    env.json(&["workspace", "ls"])
        .as_array()
        .unwrap()
        .iter()
        .map(|w| env.normalize(w["path"].as_str().unwrap()))
        .collect()
}

#[test]
fn a_commit_inside_a_workspace_of_the_same_dataset_is_refused_unless_forced() {
    let env = TestEnv::new();
    env.write("mnist/labels.csv", "1,2\n");
    env.write("mnist/training/0.png", "zero");
    env.ok(&["commit", "mnist", "-d", "mnist"]);
    // As reported: inside the workspace, its subdirectory, to the same dataset.
    assert_snapshot!(human_in(&env, "mnist", &["commit", "training", "-d", "mnist"]), @r"
    exit: 3
    --- stdout
    --- stderr
    error: [ROOT]/mnist/training is inside [ROOT]/mnist, a workspace of mnist: committing it to mnist would make a version holding only this subdirectory (replacing the dataset's whole layout) and a workspace nested in the other

    hint: commit the whole workspace from its root (`dsv commit [ROOT]/mnist`, or `dsv commit` anywhere inside it), or this directory as another dataset (`dsv commit [ROOT]/mnist/training -d NEW-NAME`); --force commits it to mnist anyway
    ");
    let error = env.json_error(&["commit", "mnist/training", "-d", "mnist"], 3);
    assert_eq!(error["kind"], "user", "{error}");
    // Nothing changed: one version, one workspace.
    assert_eq!(env.json(&["log", "mnist"]).as_array().unwrap().len(), 1);
    assert_eq!(workspace_paths(&env), ["[ROOT]/mnist"]);
    // Deeper too, and from outside the workspace.
    env.write("mnist/training/deep/1.png", "one");
    env.fails(&["commit", "mnist/training/deep", "-d", "mnist"], 3);
    // Another dataset is what the hint offers, and a commit from the workspace's root works.
    env.ok(&["commit", "mnist/training", "-d", "mnist-training"]);
    env.ok(&["commit", "mnist", "-m", "one more"]);
    assert_eq!(env.json(&["log", "mnist"]).as_array().unwrap().len(), 2);
    // --force does what was asked: a version of the subdirectory, a nested workspace.
    env.ok(&["commit", "mnist/training", "-d", "mnist", "--force"]);
    let head = env.json(&["ls", "mnist"]);
    let paths: Vec<&str> = head
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert!(paths.contains(&"0.png"), "{head}");
}

#[test]
fn init_inside_a_store_or_one_of_its_workspaces_is_refused_unless_forced() {
    let env = TestEnv::new();
    env.write("project/data/a.txt", "a");
    // Inside the store's tree: by path, and from a subdirectory.
    assert_snapshot!(human_in(&env, "project", &["init", "data"]), @r"
    exit: 3
    --- stdout
    --- stderr
    error: will not create a store in [ROOT]/project/data: it is inside [ROOT], the tree of the store at [ROOT]/.dsv (dsv commands run there use that store)

    hint: use the store at [ROOT]/.dsv (run dsv there, or pass --store [ROOT]/.dsv), or create the new store outside its tree; --force creates a nested store anyway (dsv commands run inside it will use the new store)
    ");
    let error = env.json_error(&["init", "project/new"], 3);
    assert_eq!(error["kind"], "user", "{error}");
    assert!(!env.path("project/data/.dsv").exists());
    assert!(!env.path("project/new").exists());
    let out = env
        .dsv()
        .current_dir(env.path("project/data"))
        .arg("init")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(!env.path("project/data/.dsv").exists());
    // --force creates it, and commands run there use it.
    env.ok(&["init", "--force", "project/data"]);
    assert!(env.path("project/data/.dsv/catalog.db").is_file());
    // A store of its own still says it exists (not that it is nested).
    let error = env.json_error(&["init", "project/data"], 3);
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("already exists"),
        "{error}"
    );
}

#[test]
fn init_inside_a_workspace_of_the_store_named_is_refused_and_names_both() {
    let env = TestEnv::bare();
    env.ok(&["init", "stores/main"]);
    env.write("ws/a.txt", "a");
    fs::create_dir_all(env.path("ws/inner")).unwrap();
    env.ok(&["--store", "stores/main", "commit", "ws", "-d", "d"]);
    let error = env.json_error(&["--store", "stores/main", "init", "ws/inner"], 3);
    let message = env.normalize(error["message"].as_str().unwrap());
    assert_eq!(
        message,
        "will not create a store in [ROOT]/ws/inner: it is inside [ROOT]/ws, a workspace of the store at [ROOT]/stores/main/.dsv"
    );
    assert!(!env.path("ws/inner/.dsv").exists());
    // DSV_STORE names it as well.
    let out = env
        .dsv()
        .env("DSV_STORE", env.path("stores/main"))
        .args(["init", "ws"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    // `ws/.dsv` is the workspace's link to its store (a file), never a store.
    assert!(!env.path("ws/.dsv").is_dir());
    env.ok(&["--store", "stores/main", "init", "--force", "ws/inner"]);
    assert!(env.path("ws/inner/.dsv/catalog.db").is_file());
}

#[test]
fn not_a_workspace_names_the_store() {
    let env = TestEnv::new();
    env.write("elsewhere/a.txt", "a");
    let error = env.json_error(&["status", "elsewhere"], 3);
    let message = env.normalize(error["message"].as_str().unwrap());
    assert!(
        message.contains("is not a workspace of the store at [ROOT]/.dsv"),
        "{message}"
    );
    let error = env.json_error(&["workspace", "forget", "elsewhere"], 3);
    let message = env.normalize(error["message"].as_str().unwrap());
    assert!(message.contains("the store at [ROOT]/.dsv"), "{message}");
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

/// The author of `dsv commit` with `USER`, `LOGNAME` and `DSV_AUTHOR` unset (as under cron or
/// `env -i`), HOME a temp dir, and `extra` set.
fn author_without_user(env: &TestEnv, dataset: &str, extra: &[(&str, &str)]) -> String {
    let mut cmd = env.dsv();
    cmd.env_remove("DSV_AUTHOR")
        .env_remove("USER")
        .env_remove("LOGNAME")
        // Only the HOME's .gitconfig counts, not this machine's /etc/gitconfig.
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .args(["commit", "data", "-d", dataset]);
    for (key, value) in extra {
        cmd.env(key, value);
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{out:?}");
    env.json(&["show", dataset])["author"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn the_author_falls_back_to_git_then_to_the_account_of_the_uid() {
    let env = TestEnv::new();
    env.write("data/a.txt", "a");
    let host = fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    let at_host = |user: &str| {
        if host.is_empty() {
            user.to_string()
        } else {
            format!("{user}@{host}")
        }
    };
    // No git identity (HOME is the temp dir, without a .gitconfig): the uid's account name.
    let account = nix::unistd::User::from_uid(nix::unistd::getuid())
        .unwrap()
        .map_or_else(|| "unknown".to_string(), |u| u.name);
    assert_eq!(author_without_user(&env, "a", &[]), at_host(&account));
    // git's identity when it is set, before the account name.
    // (Without git, this part is skipped, and reported.)
    if !crate::common::skip_for("git", crate::common::lacks_tool("git")) {
        env.write(
            ".gitconfig",
            "[user]\n\tname = Ada Lovelace\n\temail = ada@example.com\n",
        );
        assert_eq!(
            author_without_user(&env, "b", &[]),
            "Ada Lovelace <ada@example.com>"
        );
        env.write(".gitconfig", "[user]\n\temail = ada@example.com\n");
        assert_eq!(author_without_user(&env, "c", &[]), "ada@example.com");
        // Git's identity does not replace what was set before: $USER, then DSV_AUTHOR.
        assert_eq!(
            author_without_user(&env, "d", &[("USER", "bob")]),
            at_host("bob")
        );
        assert_eq!(
            author_without_user(&env, "e", &[("LOGNAME", "carol")]),
            at_host("carol")
        );
        assert_eq!(
            author_without_user(&env, "f", &[("DSV_AUTHOR", "dsv-author")]),
            "dsv-author"
        );
        fs::remove_file(env.path(".gitconfig")).unwrap();
    }
    // Without git on PATH at all.
    assert_eq!(
        author_without_user(&env, "g", &[("PATH", "/nonexistent")]),
        at_host(&account)
    );
}
