//! Findings of a security review, each reproduced here: paths SQLite reads as URIs, store
//! directories used as workspaces or clone targets, `--jobs` without a bound, and
//! credentials kept in options, sources and provenance.

use crate::common::TestEnv;

/// The dataset names a store lists.
fn datasets(env: &TestEnv, store: &str) -> Vec<String> {
    env.json(&["--store", store, "ls"])
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_store_directory_named_file_colon_is_a_plain_directory() {
    let env = TestEnv::bare();
    env.write("data/a.txt", "a");
    env.ok(&["init", "x"]);
    env.ok(&["--store", "x", "commit", "data", "-d", "original"]);
    // SQLite would read "file:x/.dsv/catalog.db" as a URI naming x/.dsv/catalog.db.
    env.ok(&["init", "file:x"]);
    assert!(env.path("file:x/.dsv/catalog.db").is_file());
    env.ok(&["--store", "file:x", "commit", "data", "-d", "other"]);
    assert_eq!(datasets(&env, "x"), ["original"]);
    assert_eq!(datasets(&env, "file:x"), ["other"]);
    // `clone URL file:y` next to a store y creates its own store too.
    let remote = env.path("remote");
    let url = format!("file://{}", remote.display());
    env.ok(&["--store", "x", "remote", "add", "origin", &url]);
    env.ok(&["--store", "x", "push"]);
    env.ok(&["init", "y"]);
    env.ok(&["clone", &url, "file:y"]);
    assert!(env.path("file:y/.dsv/catalog.db").is_file());
    assert_eq!(datasets(&env, "file:y"), ["original"]);
    assert!(datasets(&env, "y").is_empty());
}

#[test]
fn jobs_outside_1_to_256_are_usage_errors_for_every_command() {
    let env = TestEnv::new();
    env.write("data/a.txt", "a");
    let commands: [&[&str]; 10] = [
        &["commit", "data", "-d", "ds"],
        &["checkout", "ds", "out"],
        &["status", "data"],
        &["audit", "data"],
        &["import", "data"],
        &["update", "ds"],
        &["push"],
        &["pull", "ds"],
        &["fetch"],
        &["clone", "file:///nowhere", "c"],
    ];
    for command in commands {
        for jobs in ["0", "257", "50000", "18446744073709551615"] {
            let mut args = command.to_vec();
            args.extend(["--jobs", jobs]);
            let stderr = env.fails(&args, 2);
            assert!(stderr.contains("1..=256"), "{args:?}: {stderr}");
        }
    }
    assert!(!env.path("c").exists());
    env.ok(&["commit", "data", "-d", "ds", "-j", "256"]);
    env.ok(&["checkout", "ds", "out", "-j", "256"]);
    assert_eq!(std::fs::read(env.path("out/a.txt")).unwrap(), b"a");
}

#[test]
fn the_library_clamps_any_job_count() {
    use dsv::ops::checkout::{CheckoutOptions, checkout};
    use dsv::ops::commit::{CommitOptions, commit};
    use dsv::ops::ingest::IngestOptions;
    use dsv::progress::NoProgress;

    let env = TestEnv::new();
    for i in 0..20 {
        env.write(&format!("data/{i}.txt"), format!("file {i}"));
    }
    let mut store = dsv::Store::open(&env.path(".dsv")).unwrap();
    let options = CommitOptions {
        dataset: "ds".into(),
        message: String::new(),
        tag: None,
        author: None,
        allow_empty: false,
        ingest: IngestOptions {
            jobs: usize::MAX,
            compression_level: 3,
        },
    };
    commit(&mut store, &env.path("data"), &options, &NoProgress).unwrap();
    let revision = dsv::Revision::parse("ds").unwrap();
    let options = CheckoutOptions {
        force: false,
        jobs: usize::MAX,
    };
    checkout(
        &mut store,
        &revision,
        &env.path("out"),
        &options,
        &NoProgress,
    )
    .unwrap();
    assert_eq!(std::fs::read(env.path("out/7.txt")).unwrap(), b"file 7");
}
