//! Findings of the third trust review (issue 23) that are not about checkout: a rename read as
//! corruption, answers lost in a pipe, ignore files half read, and outside input trusted.

use crate::common::{TestEnv, files_holding, push_to_file_remote};

/// The datasets a store lists, with their version counts.
fn datasets(env: &TestEnv, store: &str) -> Vec<(String, u64)> {
    env.json(&["--store", store, "ls"])
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["name"].as_str().unwrap().to_string(),
                d["versions"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn a_renamed_dataset_keeps_its_versions_in_verify_show_a_clone_a_repair_and_the_reader() {
    let env = TestEnv::new();
    env.write("data/a.txt", "a");
    env.ok(&["commit", "data", "-d", "x", "-m", "one"]);
    env.write("data/b.txt", "b");
    env.ok(&["commit", "data", "-d", "x", "-m", "two"]);
    env.ok(&["tag", "x", "v1"]);
    env.ok(&["rename", "x", "y"]);
    env.ok(&["verify"]);
    assert_eq!(env.json(&["show", "y"])["dataset"], "y");
    env.ok(&["show", "y@v1"]);
    env.ok(&["show", "y@latest~1"]);
    assert_eq!(datasets(&env, ".dsv"), [("y".to_string(), 2)]);
    let engine =
        dsv::read::ReadEngine::open(&env.path(".dsv"), dsv::read::ReadOptions::default()).unwrap();
    assert_eq!(engine.version("y@v1").unwrap().dataset(), "y");
    drop(engine);

    // A clone sees y with every version, and checks it out as y.
    let (_, url) = push_to_file_remote(&env, "remote", "y");
    env.ok(&["clone", &url, "c"]);
    assert_eq!(datasets(&env, "c"), [("y".to_string(), 2)]);
    env.ok(&["--store", "c", "verify"]);
    let out = env
        .dsv()
        .args(["--store", "c", "checkout", "y", "out"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("Checked out y@"), "{said}");
    assert_eq!(
        env.json(&["--store", "c", "log", "y"])
            .as_array()
            .unwrap()
            .len(),
        2
    );

    // A repair rebuilds y with every version from the packs and the ref log.
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(env.path(&format!(".dsv/catalog.db{suffix}")));
    }
    env.ok(&["repair"]);
    assert_eq!(datasets(&env, ".dsv"), [("y".to_string(), 2)]);
    env.ok(&["verify"]);
    env.ok(&["show", "y@v1"]);
}

/// Runs `dsv ARGS` with stdout a pipe whose reader is gone (as after `head -1`); returns the
/// exit code and stderr.
fn run_into_closed_pipe(env: &TestEnv, args: &[&str]) -> (Option<i32>, String) {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = env
        .command()
        .args(args)
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn an_answer_keeps_its_exit_status_when_stdout_is_closed() {
    let env = TestEnv::new();
    env.write("data/a.txt", "a");
    env.write("data/b.txt", "b");
    env.ok(&["commit", "data", "-d", "ds"]);
    // A directory that differs from its version: audit answers 1, in a pipe or not.
    env.write("data/a.txt", "changed");
    env.fails(&["audit", "data"], 1);
    for json in [false, true] {
        let mut args = vec!["audit", "data"];
        if json {
            args.insert(0, "--json");
        }
        let (code, stderr) = run_into_closed_pipe(&env, &args);
        assert_eq!(code, Some(1), "{args:?}: {stderr}");
        let (code, stderr) = run_into_closed_pipe(&env, &["status", "data", "--exit-code"]);
        assert_eq!(code, Some(1), "status: {stderr}");
    }
    // A damaged store: verify answers 5, in a pipe or not.
    crate::common::damage_first_pack(&env.path(".dsv/packs"));
    env.fails(&["verify"], 5);
    for args in [&["verify"][..], &["--json", "verify"][..]] {
        let (code, stderr) = run_into_closed_pipe(&env, args);
        assert_eq!(code, Some(5), "{args:?}: {stderr}");
    }
    // Plain output into a closed pipe is no failure.
    let (code, stderr) = run_into_closed_pipe(&env, &["ls"]);
    assert_eq!(code, Some(0), "{stderr}");
}

#[test]
fn an_ignore_file_that_cannot_be_read_whole_is_refused_naming_its_line() {
    let env = TestEnv::new();
    env.write("data/a.txt", "a");
    env.write("data/secrets.env", "KEY=1");
    env.write("data/sub/secrets.env", "KEY=2");
    env.write("data/.dsvignore", "secrets.env\n");
    env.ok(&["commit", "data", "-d", "ds"]);
    let bad: [(&str, &[u8], &str); 5] = [
        ("data/.dsvignore", b"# caf\xe9\nsecrets.env\n", "line 1"),
        // An ignore file that leaves itself out is never listed, yet obeyed: checked too.
        (
            "data/.dsvignore",
            b".dsvignore\ncaf\xe9\nsecrets.env\n",
            "line 2",
        ),
        ("data/.dsvignore", b".*\n[z-a].txt\nsecrets.env\n", "line 2"),
        (
            "data/.dsvignore",
            b"*.tmp\n[z-a].txt\nsecrets.env\n",
            "line 2",
        ),
        (
            "data/sub/.dsvignore",
            b"*.tmp\n\n\xff\nsecrets.env\n",
            "line 3",
        ),
    ];
    for (file, text, line) in bad {
        let _ = std::fs::remove_file(env.path("data/.dsvignore"));
        let _ = std::fs::remove_file(env.path("data/sub/.dsvignore"));
        if file == "data/sub/.dsvignore" {
            env.write("data/.dsvignore", "secrets.env\n");
        }
        env.write(file, text);
        for args in [
            &["commit", "data", "-d", "ds"][..],
            &["status", "data"][..],
            &["import", "data", "-d", "imported"][..],
        ] {
            let error = env.json_error(args, 3);
            let message = error["message"].as_str().unwrap();
            assert!(message.contains(".dsvignore"), "{args:?}: {error}");
            assert!(message.contains(line), "{args:?}: {error}");
        }
        assert_eq!(env.json(&["ls"]).as_array().unwrap().len(), 1);
        assert_eq!(crate::common::version_ids(&env, "ds").len(), 1);
    }
    // Mended, the rules hold.
    env.write("data/sub/.dsvignore", "secrets.env\n");
    env.write("data/b.txt", "b");
    env.ok(&["commit", "data", "-d", "ds"]);
    let files = env.ok(&["ls", "ds"]);
    assert!(!files.contains("secrets.env"), "{files}");
}

#[test]
fn audit_of_a_workspace_whose_version_was_removed_answers_as_status_does() {
    let env = TestEnv::new();
    env.write("w/x.txt", "x\n");
    env.ok(&["commit", "w", "-d", "ds"]);
    env.write("w2/y.txt", "y\n");
    env.ok(&["commit", "w2", "-d", "ds"]);
    let first = crate::common::version_ids(&env, "ds")[1].clone();
    std::fs::rename(env.path("w"), env.path("w-away")).unwrap();
    env.ok(&["rm", &format!("ds@{}", &first[..12])]);
    env.ok(&["gc"]);
    std::fs::rename(env.path("w-away"), env.path("w")).unwrap();
    let status = env.json_error(&["status", "w"], 3);
    assert!(status.to_string().contains("removed"), "{status}");
    for args in [&["audit", "w"][..], &["audit", "w", "--full"][..]] {
        let error = env.json_error(args, 3);
        let text = error.to_string();
        assert!(text.contains("removed"), "{args:?}: {error}");
        assert!(!text.contains("another copy"), "{args:?}: {error}");
        assert_eq!(error["kind"], "user", "{args:?}: {error}");
    }
}

/// Runs `dsv ARGS` and waits for it to end, at most [`crate::common::PATIENCE`] (what tells a
/// hang from a slow machine); `None` when it did not end by then (it is killed).
fn run_within(env: &TestEnv, args: &[&str]) -> Option<std::process::Output> {
    let mut child = env.spawn(args);
    let deadline = std::time::Instant::now() + crate::common::PATIENCE;
    while std::time::Instant::now() < deadline {
        if child.try_wait().unwrap().is_some() {
            return Some(child.wait_with_output().unwrap());
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

#[test]
fn a_fifo_or_a_symlink_among_the_stores_leases_or_packs_never_hangs_gc_or_repair() {
    let env = TestEnv::new();
    env.write("data/a.txt", "a");
    env.ok(&["commit", "data", "-d", "ds"]);
    std::fs::create_dir_all(env.path(".dsv/leases")).unwrap();
    let fifo = |relative: &str| {
        let made = std::process::Command::new("mkfifo")
            .arg(env.path(relative))
            .status()
            .unwrap();
        assert!(made.success());
    };
    fifo(".dsv/leases/lease-fifo.json");
    fifo(&format!(".dsv/packs/{}.pack", "ab".repeat(32)));
    std::os::unix::fs::symlink(
        env.path("data/a.txt"),
        env.path(".dsv/leases/lease-link.json"),
    )
    .unwrap();
    for args in [&["gc"][..], &["gc", "--dry-run"][..], &["verify"][..]] {
        let out = run_within(&env, args).unwrap_or_else(|| panic!("dsv {args:?} hangs"));
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = run_within(&env, &["--json", "repair"]).expect("dsv repair hangs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    env.ok(&["ls", "ds"]);
}

#[test]
fn tag_racing_rename_gets_a_clean_answer() {
    let env = TestEnv::new();
    env.write("data/a.txt", "a");
    env.ok(&["commit", "data", "-d", "x"]);
    let (mut from, mut to) = ("x", "y");
    for round in 0..40 {
        let tag = format!("t{round}");
        let tagging: Vec<_> = (0..3)
            .map(|i| env.spawn(&["tag", from, &format!("{tag}-{i}")]))
            .collect();
        let renaming = env.spawn(&["rename", from, to]);
        for child in tagging {
            let out = child.wait_with_output().unwrap();
            let code = out.status.code();
            assert!(
                matches!(code, Some(0) | Some(3)),
                "round {round}: tag exited {code:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let out = renaming.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::mem::swap(&mut from, &mut to);
    }
    env.ok(&["verify"]);
}

#[test]
fn a_default_aws_profile_with_only_credential_process_is_refused_not_replaced_by_instance_metadata()
{
    let env = TestEnv::new();
    env.write(
        ".aws/config",
        "[default]\nregion = us-east-1\ncredential_process = /bin/false\n",
    );
    let out = env
        .dsv()
        .args(["--json", "clone", "s3://some-bucket/prefix", "c"])
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("credential_process"), "{stderr}");
    assert!(stderr.contains("\"default\""), "{stderr}");
}

#[test]
fn repair_replays_no_ref_log_line_its_command_would_refuse() {
    let env = TestEnv::new();
    env.write("data/a.txt", "a");
    env.ok(&["commit", "data", "-d", "ds"]);
    let version = crate::common::version_ids(&env, "ds")[0].clone();
    let good_remote = format!("file://{}", env.path("remote").display());
    let forged = [
        format!(r#"{{"time":1,"op":"head","dataset":"../evil","version":"{version}"}}"#),
        format!(r#"{{"time":1,"op":"tag","dataset":"ds","tag":"latest","version":"{version}"}}"#),
        format!(r#"{{"time":1,"op":"tag","dataset":"ds","tag":"bad tag","version":"{version}"}}"#),
        r#"{"time":1,"op":"remote","name":"plain","url":"http://example.com/x","options":{}}"#.into(),
        r#"{"time":1,"op":"remote","name":"keyed","url":"s3://bucket/p","options":{"aws_secret_access_key":"FORGEDSECRET"}}"#.into(),
        r#"{"time":1,"op":"remote","name":"userinfo","url":"s3://me:FORGEDPASSWORD@bucket/p","options":{}}"#.into(),
        r#"{"time":1,"op":"remote","name":"bad/name","url":"s3://bucket/p","options":{}}"#.into(),
        format!(r#"{{"time":1,"op":"remote","name":"fine","url":"{good_remote}","options":{{}}}}"#),
        format!(r#"{{"time":1,"op":"tag","dataset":"ds","tag":"v1","version":"{version}"}}"#),
    ];
    let log_path = env.path(".dsv/reflog");
    let mut log = std::fs::read_to_string(&log_path).unwrap();
    let first_forged = log.lines().count() + 1;
    for line in &forged {
        log.push_str(line);
        log.push('\n');
    }
    std::fs::write(&log_path, log).unwrap();
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(env.path(&format!(".dsv/catalog.db{suffix}")));
    }
    let report = env.json(&["repair"]);
    let refused = report["ref_log_refused_lines"].as_array().unwrap();
    let lines: Vec<u64> = refused
        .iter()
        .map(|r| r["line"].as_u64().unwrap())
        .collect();
    let expected: Vec<u64> = (first_forged..first_forged + 7).map(|n| n as u64).collect();
    assert_eq!(lines, expected, "{report}");
    for r in refused {
        assert!(!r["reason"].as_str().unwrap().is_empty(), "{report}");
    }
    assert!(!report.to_string().contains("FORGED"), "{report}");

    // Only the valid names came back; no secret is anywhere in the store's records.
    assert_eq!(datasets(&env, ".dsv"), [("ds".to_string(), 1)]);
    let remotes: Vec<String> = env
        .json(&["remote", "ls"])
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(remotes, ["fine"]);
    let tags = env.ok(&["tag", "--list", "ds"]);
    assert!(tags.contains("v1") && !tags.contains("bad"), "{tags}");
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(!log.contains("FORGED") && !log.contains("evil"), "{log}");
    env.ok(&["verify"]);

    // The text report names the line and why; a repair of the repaired log refuses nothing.
    let text = env.ok(&["repair"]);
    assert!(!text.contains("refused"), "{text}");
    let mut log = std::fs::read_to_string(&log_path).unwrap();
    let line = log.lines().count() + 1;
    log.push_str(&forged[3]);
    log.push('\n');
    std::fs::write(&log_path, log).unwrap();
    std::fs::remove_file(env.path(".dsv/catalog.db")).unwrap();
    let text = env.ok(&["repair"]);
    assert!(text.contains(&format!("line {line}")), "{text}");
    assert!(text.contains("http"), "{text}");
    assert_eq!(env.json(&["remote", "ls"]).as_array().unwrap().len(), 1);
}

#[test]
fn url_credentials_and_signatures_are_redacted_in_messages_and_never_recorded() {
    let env = TestEnv::new();
    env.write("data/a.txt", "a");
    env.ok(&["commit", "data", "-d", "ds"]);
    let secrets = [
        "PWSECRET",
        "SIGSECRET",
        "CREDSECRET",
        "TOKSECRET",
        "AZSIGSECRET",
    ];
    let signed = "?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=CREDSECRET\
                  &X-Amz-Security-Token=TOKSECRET&X-Amz-Signature=SIGSECRET";
    let refused: Vec<Vec<String>> = vec![
        // A password in a remote URL: refused, and the refusal does not echo it.
        vec![
            "remote".into(),
            "add".into(),
            "o".into(),
            "s3://me:PWSECRET@bucket/p".into(),
        ],
        // A presigned query string or an Azure SAS on a remote URL: refused as credentials.
        vec![
            "remote".into(),
            "add".into(),
            "o".into(),
            format!("s3://bucket/p{signed}"),
        ],
        vec![
            "remote".into(),
            "add".into(),
            "o".into(),
            "az://container/p?sv=2024-01-01&se=2030&sr=c&sp=rl&sig=AZSIGSECRET".into(),
        ],
        vec![
            "remote".into(),
            "add".into(),
            "o".into(),
            "s3://bucket/p".into(),
            "--option".into(),
            format!("aws_endpoint=https://host/{signed}"),
        ],
        vec!["clone".into(), format!("gs://bucket/p{signed}"), "c".into()],
    ];
    for args in &refused {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        for json in [false, true] {
            let mut full = if json { vec!["--json"] } else { vec![] };
            full.extend_from_slice(&args);
            let out = env.run(&full);
            let said = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(out.status.code(), Some(3), "{args:?}: {said}");
            for secret in secrets {
                assert!(!said.contains(secret), "{args:?} echoes {secret}: {said}");
            }
            // A refused option is named by its key; a refused URL is shown redacted.
            if !args.contains(&"--option") {
                assert!(said.contains("REDACTED"), "{args:?}: {said}");
            }
        }
    }
    // An import that fails says which URL, without its password or signature, in the
    // message and in the causes.
    let url = format!("http://me:PWSECRET@127.0.0.1:1/labels.csv{signed}");
    for json in [false, true] {
        let mut full = if json { vec!["--json"] } else { vec![] };
        full.extend_from_slice(&["import", &url, "-d", "labels"]);
        let out = env
            .dsv()
            .args(&full)
            .timeout(std::time::Duration::from_secs(60))
            .output()
            .unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.status.success(), "{said}");
        for secret in secrets {
            assert!(!said.contains(secret), "import echoes {secret}: {said}");
        }
        assert!(said.contains("127.0.0.1:1/labels.csv"), "{said}");
    }
    assert_eq!(
        files_holding(&env.path(".dsv"), &secrets),
        Vec::<String>::new()
    );
    assert!(env.json(&["remote", "ls"]).as_array().unwrap().is_empty());
}

#[test]
fn a_dsvignore_that_is_a_fifo_or_a_symlink_is_refused_never_opened() {
    let env = TestEnv::new();
    env.write("data/a.txt", "a");
    env.write("data/sub/b.txt", "b");
    env.write("outside-rules", "b.txt\n");
    env.ok(&["commit", "data", "-d", "ds"]);
    env.write("data/c.txt", "c");
    for place in ["data/sub/.dsvignore", "data/.dsvignore"] {
        let made = std::process::Command::new("mkfifo")
            .arg(env.path(place))
            .status()
            .unwrap();
        assert!(made.success());
        for args in [
            &["--json", "commit", "data", "-d", "ds"][..],
            &["--json", "status", "data"][..],
            &["--json", "import", "data", "-d", "imported"][..],
        ] {
            let out = run_within(&env, args)
                .unwrap_or_else(|| panic!("dsv {args:?} hangs on a FIFO at {place}"));
            assert_eq!(out.status.code(), Some(3), "{args:?}: {out:?}");
            let said = String::from_utf8_lossy(&out.stdout);
            assert!(said.contains(place), "{args:?}: {said}");
            assert!(said.contains("not a regular file"), "{args:?}: {said}");
        }
        std::fs::remove_file(env.path(place)).unwrap();
        // A symlink is not followed to rules elsewhere: refused the same way.
        std::os::unix::fs::symlink(env.path("outside-rules"), env.path(place)).unwrap();
        let error = env.json_error(&["commit", "data", "-d", "ds"], 3);
        let message = error["message"].as_str().unwrap();
        assert!(message.contains(place), "{error}");
        assert!(message.contains("not a regular file"), "{error}");
        std::fs::remove_file(env.path(place)).unwrap();
    }
    assert_eq!(datasets(&env, ".dsv"), [("ds".to_string(), 1)]);
    env.ok(&["commit", "data", "-d", "ds"]);
    assert_eq!(datasets(&env, ".dsv"), [("ds".to_string(), 2)]);
}

/// The review of finding 4: a remote that keeps the old name's ref after a rename (push x,
/// rename x y, push y) is cloned with both datasets listing every version, and checking out
/// either names it.
#[test]
fn a_clone_of_a_remote_holding_both_names_lists_every_version_under_each() {
    let env = TestEnv::new();
    env.write("data/a.txt", "a");
    env.ok(&["commit", "data", "-d", "x", "-m", "one"]);
    env.write("data/b.txt", "b");
    env.ok(&["commit", "data", "-d", "x", "-m", "two"]);
    let first = crate::common::version_ids(&env, "x")
        .last()
        .unwrap()
        .clone();
    let (_, url) = push_to_file_remote(&env, "remote", "x");
    env.ok(&["rename", "x", "y"]);
    env.ok(&["push", "y"]);
    env.ok(&["clone", &url, "c"]);
    assert_eq!(
        datasets(&env, "c"),
        [("x".to_string(), 2), ("y".to_string(), 2)]
    );
    for name in ["x", "y"] {
        env.ok(&["--store", "c", "show", &format!("{name}@{}", &first[..12])]);
        let dir = format!("out-{name}");
        let said = env.ok(&["--store", "c", "checkout", name, &dir]);
        assert!(said.contains(&format!("Checked out {name}@")), "{said}");
        let status = env.json(&["--store", "c", "status", &dir]);
        assert_eq!(status["dataset"], name, "{status}");
    }
    env.ok(&["--store", "c", "verify"]);
    // Pulling the old name back does not take the versions from the new one.
    env.ok(&["pull", "x"]);
    assert_eq!(
        datasets(&env, ".dsv"),
        [("x".to_string(), 2), ("y".to_string(), 2)]
    );
}

#[test]
fn a_parent_cycle_in_a_damaged_catalog_ends_the_ancestry_walk_with_an_error() {
    let env = TestEnv::new();
    env.write("d/a.txt", "one\n");
    let first = env.json(&["commit", "d", "-d", "ds"])["version"]
        .as_str()
        .unwrap()
        .to_string();
    env.write("d/a.txt", "two\n");
    let second = env.json(&["commit", "d", "-d", "ds"])["version"]
        .as_str()
        .unwrap()
        .to_string();
    // The first version's row made to name the second as its parent: a cycle.
    let catalog = rusqlite::Connection::open(env.path(".dsv/catalog.db")).unwrap();
    let id = |hex: &str| hex.parse::<dsv::ObjectId>().unwrap();
    catalog
        .execute(
            "UPDATE versions SET parent = ?1 WHERE id = ?2",
            rusqlite::params![id(&second).0.to_vec(), id(&first).0.to_vec()],
        )
        .unwrap();
    drop(catalog);
    let store = dsv::Store::open(&env.path(".dsv")).unwrap();
    let elsewhere = id(&"ab".repeat(32));
    let walked = store.catalog().is_ancestor(&elsewhere, &id(&second));
    assert!(
        matches!(walked, Err(dsv::Error::Corrupt { .. })),
        "{walked:?}"
    );
    assert!(
        store
            .catalog()
            .is_ancestor(&id(&first), &id(&second))
            .unwrap()
    );
}
