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
