//! Issue 34, part A: what an attacker's round 4 found, each refused at its rule. Planted
//! FIFOs inside a store (lock files, the catalog, settings), a version too large for the
//! process's `ulimit -v`, URLs with passwords in every argument form, an ignore rule that
//! does not parse, and file names holding control characters.

use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use insta::assert_snapshot;

use crate::common::{TestEnv, plant, push_to_file_remote, settle};

/// What a run that must end promptly did: its exit code (`None`: still running after
/// `patience`, then killed), stdout and stderr.
struct Ended {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `dsv ARGS` in `env`, killing it after `patience` (a run that waits on a FIFO would
/// wait forever).
fn run_within(env: &TestEnv, args: &[&str], patience: Duration) -> Ended {
    let start = Instant::now();
    let mut child = env.spawn(args);
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if start.elapsed() >= patience {
            child.kill().unwrap();
            child.wait().unwrap();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let output = child.wait_with_output().unwrap();
    Ended {
        code,
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn mkfifo(path: &Path) {
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::S_IRWXU).unwrap();
    assert!(
        std::fs::symlink_metadata(path)
            .unwrap()
            .file_type()
            .is_fifo()
    );
}

/// Asserts `run` ended (not killed) with `code`, its stderr naming `path` as a FIFO and
/// saying to remove it.
fn assert_refused_fifo(run: &Ended, code: i32, path: &Path, what: &str) {
    assert_eq!(run.code, Some(code), "{what}: {}{}", run.stdout, run.stderr);
    let name = path.file_name().unwrap().to_str().unwrap();
    assert!(
        run.stderr.contains(name)
            && run.stderr.contains("a FIFO")
            && run.stderr.contains("remove it"),
        "{what}: {}",
        run.stderr
    );
}

/// Issue 34, A1: FIFOs planted as every fetch stripe lock of a remote-only clone made every
/// remote read wait forever in `openat`, deaf to SIGTERM. Now each lock file (and every other
/// file dsv opens inside a store) is opened without following or waiting, and anything but
/// a regular file is refused, naming it.
#[test]
fn fifos_planted_inside_a_store_are_refused_at_once_not_waited_on() {
    let env = TestEnv::new();
    env.write("d/big.bin", crate::common::pseudo_random(300_000, 7));
    env.ok(&["commit", "d", "-d", "big"]);
    let (_remote, url) = push_to_file_remote(&env, "remote", "big");
    env.ok(&["clone", &url, "cl"]);
    let locks = env.path("cl/.dsv/locks");
    std::fs::create_dir_all(&locks).unwrap();
    for stripe in 0..4096 {
        let path = locks.join(format!("fetch-{stripe:03x}.lock"));
        if !path.exists() {
            mkfifo(&path);
        }
    }
    let patience = Duration::from_secs(20);
    let cat = run_within(&env, &["--store", "cl", "cat", "big:big.bin"], patience);
    assert_refused_fifo(
        &cat,
        6,
        Path::new("fetch-"),
        "cat through planted stripe locks",
    );
    assert!(cat.stderr.contains("locks/fetch-"), "{}", cat.stderr);

    // The download lock: pull.
    std::fs::remove_dir_all(&locks).unwrap();
    std::fs::create_dir_all(&locks).unwrap();
    let downloads = locks.join("downloads.lock");
    mkfifo(&downloads);
    let pull = run_within(&env, &["--store", "cl", "pull", "big"], patience);
    assert_refused_fifo(&pull, 6, &downloads, "pull through a planted download lock");
    std::fs::remove_file(&downloads).unwrap();
    env.ok(&["--store", "cl", "pull", "big"]);

    // The head lock, the settings and the catalog's journal of the store itself.
    for (name, args) in [
        ("lock", &["tag", "big", "v1"][..]),
        ("config.toml", &["config", "list"]),
        ("catalog.db-wal", &["tag", "big", "v1"]),
    ] {
        let planted = env.path(&format!(".dsv/{name}"));
        let _ = std::fs::remove_file(&planted);
        mkfifo(&planted);
        let run = run_within(&env, args, patience);
        assert_refused_fifo(&run, 6, &planted, name);
        std::fs::remove_file(&planted).unwrap();
    }
    env.ok(&["tag", "big", "v1"]);
    env.ok(&["verify"]);
}

/// The honest-limit version: 2^25 files (`MAX_VERSION_FILES`) in 2^21 - 2 directories (within
/// `MAX_VERSION_DIRS`), a leaf of 32 files doubled 20 times; every claim true, a few KB.
fn plant_files_2_to_the_25(env: &TestEnv) {
    plant_doubled(env, 20);
}

/// A version of `ds` whose leaf of 32 one-byte files (each the chunk `x`, held too) is
/// doubled `doublings` times: 32 * 2^doublings files.
fn plant_doubled(env: &TestEnv, doublings: u32) {
    use dsv::object::{EntryKind, ObjectKind, Tree, TreeEntry, Version};
    let mut objects = vec![(dsv::ObjectId::of(b"x"), ObjectKind::Chunk, b"x".to_vec())];
    let mut below = Tree {
        entries: (0..32)
            .map(|i| TreeEntry {
                name: format!("f{i:02}"),
                kind: EntryKind::File { executable: false },
                size: 1,
                id: dsv::ObjectId::of(b"x"),
            })
            .collect(),
    };
    let mut files = 32u64;
    for _ in 0..doublings {
        objects.push((below.id(), ObjectKind::Tree, below.encode()));
        let id = below.id();
        let entry = |name: &str| TreeEntry {
            name: name.into(),
            kind: EntryKind::Dir { files },
            size: files,
            id,
        };
        below = Tree {
            entries: vec![entry("a"), entry("b")],
        };
        files *= 2;
    }
    objects.push((below.id(), ObjectKind::Tree, below.encode()));
    let (bytes, files) = below.totals();
    let version = Version {
        dataset: "ds".into(),
        tree: below.id(),
        parent: None,
        author: "tester".into(),
        time: 1_700_000_000,
        files,
        bytes,
        source: "/nowhere".into(),
        provenance: None,
        message: "2^25 files".into(),
    };
    objects.push((version.id(), ObjectKind::Version, version.encode()));
    plant(env, &objects, &version);
}

/// Issue 34, A6: `shards` and `export --shard` of a version of 2^25 files aborted with
/// SIGABRT ("memory allocation of 2952790016 bytes failed") under `ulimit -v 4000000`: the
/// guard read the machine's memory, not the process's limit. Now they refuse it, exit 3.
#[test]
fn a_version_too_large_for_ulimit_v_is_refused_not_aborted_on() {
    let env = TestEnv::new();
    plant_files_2_to_the_25(&env);
    let dsv = crate::common::dsv_binary();
    for args in [
        "shards ds 4",
        "--json shards ds 4",
        "export ds -o out.tar --shard 0/4",
    ] {
        let mut bash = Command::new("bash");
        env.sandbox().apply(&mut bash);
        let out = bash
            .arg("-c")
            .arg(format!(
                "ulimit -v 4000000; exec '{}' {args}",
                dsv.display()
            ))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(3),
            "dsv {args} under ulimit -v 4000000: {:?}\n{stdout}{stderr}",
            out.status
        );
        let text = format!("{stdout}{stderr}");
        assert!(
            text.contains("33554432 files") && text.contains("ulimit -v"),
            "{args}: {text}"
        );
    }
    // Streaming listings need no whole listing: the same limit lists a directory.
    let mut bash = Command::new("bash");
    env.sandbox().apply(&mut bash);
    let out = bash
        .arg("-c")
        .arg(format!(
            "ulimit -v 4000000; exec '{}' ls ds:a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a",
            dsv.display()
        ))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A fetch records versions any process of the machine may list later: its own `ulimit -v`
/// does not refuse a version the machine's memory can list (2^22 files: about 5 GB listed,
/// more than `ulimit -v 4000000`), while a listing under that limit still refuses it.
#[test]
fn a_clone_under_ulimit_v_records_a_version_the_machine_can_list() {
    let env = TestEnv::new();
    plant_doubled(&env, 17);
    let (_, url) = push_to_file_remote(&env, "remote", "ds");
    let dsv = crate::common::dsv_binary();
    let under_limit = |args: &str| {
        let mut bash = Command::new("bash");
        env.sandbox().apply(&mut bash);
        bash.arg("-c")
            .arg(format!(
                "ulimit -v 4000000; exec '{}' {args}",
                dsv.display()
            ))
            .output()
            .unwrap()
    };
    let out = under_limit(&format!("clone '{url}' cl"));
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let out = under_limit("--store cl shards ds 4");
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert!(text.contains("4194304 files"), "{text}");
}

/// Issue 34, A7: a password in a URL argument was echoed when the URL was malformed (taken
/// as a path), cut before its `@` (as a dataset name), or unexpected (clap's usage error).
#[test]
fn a_password_in_any_argument_is_never_echoed() {
    let env = TestEnv::new();
    env.write("d/a.txt", "a\n");
    env.ok(&["commit", "d", "-d", "ds"]);
    push_to_file_remote(&env, "remote", "ds");
    let secret = "PWs3cretZ";
    let malformed = format!("http:/user:{secret}@host/p");
    let full = format!("https://u:{secret}@h/x");
    let runs: Vec<Vec<&str>> = vec![
        vec!["remote", "add", "r", &malformed],
        vec!["clone", &malformed, "c1"],
        vec!["import", &malformed, "-d", "x"],
        vec!["fetch", &full],
        vec!["clone", "a", "b", &full],
        vec!["push", &full],
        vec!["pull", &full],
        vec!["remote", "add", "r", &full],
    ];
    for args in runs {
        for json in [false, true] {
            let mut all = if json { vec!["--json"] } else { vec![] };
            all.extend(&args);
            let out = env.run(&all);
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(!out.status.success(), "dsv {all:?} succeeded: {text}");
            assert!(
                !text.contains(secret),
                "dsv {all:?} echoed the password: {text}"
            );
            assert!(text.contains(dsv::redact::REDACTED), "dsv {all:?}: {text}");
        }
    }
    // A credential typed as an option with the wrong separator is named by its place only.
    let typo = format!("aws_secret_access_key:{secret}");
    for json in [false, true] {
        let mut all = if json { vec!["--json"] } else { vec![] };
        all.extend(["remote", "add", "r2", "s3://b/p", "--option", &typo]);
        let out = env.run(&all);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.status.success(), "dsv {all:?} succeeded: {text}");
        assert!(
            !text.contains(secret),
            "dsv {all:?} echoed the password: {text}"
        );
        assert!(text.contains("--option number 1 of 1"), "{text}");
    }
}

/// Issue 34, A8: an ignore rule that does not parse (`secrets[.env`) was dropped and the file
/// it meant to leave out was committed.
#[test]
fn an_ignore_rule_that_does_not_parse_is_refused_with_its_line() {
    let env = TestEnv::new();
    env.write("d/.dsvignore", "*.tmp\nsecrets[.env\n");
    env.write("d/secrets.env", "PASSWORD=hunter2\n");
    env.write("d/a.txt", "a\n");
    settle(env.path("d"));
    let stderr = env.fails(&["commit", "d", "-d", "ds"], 3);
    assert!(
        stderr.contains(".dsvignore")
            && stderr.contains("line 2")
            && stderr.contains("secrets[.env"),
        "{stderr}"
    );
    assert!(env.json(&["ls"]).as_array().unwrap().is_empty());
    // A literal `[` is written `\[`.
    env.write("d/.dsvignore", "*.tmp\nsecrets.env\nliteral\\[.txt\n");
    env.write("d/literal[.txt", "l\n");
    settle(env.path("d"));
    env.ok(&["commit", "d", "-d", "ds"]);
    let listed = env.json(&["ls", "ds"]);
    let paths: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, [".dsvignore", "a.txt"]);
}

/// Issue 34, A9: `dsv ls` printed a name holding a newline raw (two lines for one path). Human
/// output quotes such names as `git ls-files` does; `--json` keeps them exact.
#[test]
fn names_with_control_characters_are_quoted_in_human_output_only() {
    let env = TestEnv::new();
    env.write("d/plain.txt", "p\n");
    env.write("d/two\nlines.txt", "n\n");
    env.write("d/tab\there \"q\" back\\slash", "t\n");
    env.write("d/esc\u{1b}[31mred", "e\n");
    settle(env.path("d"));
    env.ok(&["commit", "d", "-d", "ds"]);
    let ls = env.ok(&["ls", "ds"]);
    assert_snapshot!(ls, @r#"
    -  2 B  "esc\033[31mred"
    -  2 B  plain.txt
    -  2 B  "tab\there \"q\" back\\slash"
    -  2 B  "two\nlines.txt"
    "#);
    let listed = env.json(&["ls", "ds"]);
    let paths: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert!(paths.contains(&"two\nlines.txt"), "{paths:?}");
    std::fs::remove_file(env.path("d/two\nlines.txt")).unwrap();
    env.write("d/new\rname", "r\n");
    settle(env.path("d"));
    let status = env.ok(&["status", "d"]);
    assert!(
        status.contains("A \"new\\rname\"") && status.contains("D \"two\\nlines.txt\""),
        "{status}"
    );
    env.ok(&["commit", "d", "-d", "ds"]);
    let diff = env.ok(&["diff", "ds@latest~1", "ds"]);
    assert!(
        diff.contains("A \"new\\rname\"") && diff.contains("D \"two\\nlines.txt\""),
        "{diff}"
    );
}

/// A checkout outside the store's tree writes a store link `DIR/.dsv`, but a file of the
/// user's named `.dsv` there is never replaced (only a store link is).
#[test]
fn a_users_file_named_dsv_in_a_workspace_is_never_replaced_by_a_store_link() {
    let env = TestEnv::new();
    env.write("data/a.txt", "a\n");
    env.ok(&["commit", "data", "-d", "ds"]);
    let elsewhere = TestEnv::bare();
    elsewhere.write("work/ds/.dsv", "my notes\n");
    let workspace = elsewhere.path("work/ds");
    env.ok(&["checkout", "ds", workspace.to_str().unwrap()]);
    assert_eq!(
        std::fs::read_to_string(workspace.join(".dsv")).unwrap(),
        "my notes\n"
    );
    assert_eq!(
        std::fs::read_to_string(workspace.join("a.txt")).unwrap(),
        "a\n"
    );
}

/// A lock file is a user's file read whole: a FIFO given as the lock is refused at once
/// (never waited on) and one longer than 16 MiB is refused before it is read whole.
#[test]
fn a_lock_file_that_is_a_fifo_or_huge_is_refused_at_once() {
    let env = TestEnv::new();
    let fifo = env.path("dsv.lock");
    mkfifo(&fifo);
    let run = run_within(
        &env,
        &["checkout", "--lock", "dsv.lock", "run"],
        Duration::from_secs(60),
    );
    assert_eq!(run.code, Some(3), "{}{}", run.stdout, run.stderr);
    assert!(run.stderr.contains("not a regular file"), "{}", run.stderr);
    std::fs::remove_file(&fifo).unwrap();
    env.write("dsv.lock", vec![b' '; (16 << 20) + 1]);
    let run = run_within(
        &env,
        &["audit", "run", "--lock", "dsv.lock"],
        Duration::from_secs(60),
    );
    assert_eq!(run.code, Some(3), "{}{}", run.stdout, run.stderr);
    assert!(run.stderr.contains("longer than 16 MiB"), "{}", run.stderr);
}

/// `init` over a `.dsv` holding leftovers but no catalog (a `lock`, an empty `tmp/`) says
/// what is there and what to do, not "a store exists"; a staging directory a killed
/// `init` or `clone` left beside it is removed by the next `init` once its process is gone.
#[test]
fn init_names_leftovers_without_a_catalog_and_removes_a_dead_staging_directory() {
    let env = TestEnv::bare();
    env.write(".dsv/lock", "");
    std::fs::create_dir_all(env.path(".dsv/tmp")).unwrap();
    let out = env.run(&["init"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("\"lock\", \"tmp\" but no catalog") && stderr.contains("rm -r"),
        "{stderr}"
    );
    assert!(!stderr.contains("already exists"), "{stderr}");

    // A dead process's staging directory (a whole metadata store) beside `.dsv`.
    std::fs::remove_dir_all(env.path(".dsv")).unwrap();
    let mut gone = Command::new("true").spawn().unwrap();
    let dead = gone.id();
    gone.wait().unwrap();
    let staging = format!(".dsv-tmp-{dead}-0");
    env.write(&format!("{staging}/lock"), "");
    env.write(&format!("{staging}/catalog.db"), "");
    std::fs::create_dir_all(env.path(&format!("{staging}/packs"))).unwrap();
    env.ok(&["init"]);
    assert!(
        !env.path(&staging).exists(),
        "the dead staging directory is left"
    );
    assert!(env.path(".dsv/catalog.db").exists());
}
