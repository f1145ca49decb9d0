//! The errors' layers as the command line shows them: a command line whose form is wrong is
//! a usage error (exit 2, kind "usage"), whether clap or the CLI's own check finds it
//! (docs/cli.md, "Exit codes"); every hint the CLI prints is the library's (`Error::hints`).

use crate::common::TestEnv;

/// `dsv --json ARGS` exits 2 with a usage error whose message contains `says`.
fn usage(env: &TestEnv, args: &[&str], says: &str) {
    let error = env.json_error(args, 2);
    assert_eq!(error["kind"], "usage", "{args:?}: {error}");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains(says), "{args:?}: {message}");
}

fn with_a_dataset() -> TestEnv {
    let env = TestEnv::new();
    env.write("data/a.txt", "a");
    env.ok(&["commit", "data", "--dataset", "d"]);
    env
}

#[test]
fn cat_without_rev_colon_path_is_a_usage_error() {
    let env = with_a_dataset();
    usage(&env, &["cat", "d"], "expected REV:PATH");
    // Found before any store is looked for.
    let elsewhere = TestEnv::bare();
    usage(&elsewhere, &["cat", "d"], "expected REV:PATH");
}

#[test]
fn a_range_that_is_not_start_dot_dot_end_is_a_usage_error() {
    let env = with_a_dataset();
    for (range, says) in [
        ("5", "--range must look like START..END"),
        ("x..", "--range START is not a number"),
        ("..y", "--range END is not a number"),
        ("9..3", "--range START must not exceed END"),
    ] {
        usage(&env, &["cat", "d:a.txt", "--range", range], says);
    }
    // A range of the right form past the end is the library's refusal: exit 3.
    let error = env.json_error(&["cat", "d:a.txt", "--range", "5.."], 3);
    assert_eq!(error["kind"], "user", "{error}");
}

#[test]
fn an_option_without_equals_is_a_usage_error() {
    let env = TestEnv::new();
    for args in [
        &["remote", "add", "o", "s3://bucket/p", "--option", "novalue"][..],
        &["clone", "s3://bucket/p", "c", "--option", "novalue"],
        &["import", "s3://bucket/key", "--option", "novalue"],
    ] {
        usage(&env, args, "--option must look like KEY=VALUE");
    }
    assert!(!env.path("c").exists());
}

#[test]
fn an_until_that_is_neither_a_time_nor_a_duration_is_a_usage_error() {
    let env = with_a_dataset();
    usage(
        &env,
        &["pin", "d", "--until", "someday"],
        "is neither a time",
    );
    assert!(env.json(&["pins"]).as_array().unwrap().is_empty());
}

#[test]
fn checkout_with_a_lock_and_a_revision_is_a_usage_error() {
    let env = with_a_dataset();
    env.write("dsv.lock", env.ok(&["lock", "d"]));
    usage(
        &env,
        &["checkout", "--lock", "dsv.lock", "d", "out"],
        "with --lock, give only the directory",
    );
    assert!(!env.path("out").exists());
}

/// The CLI prints the library's hints (`Error::hints`) and words none of its own: every
/// `hint:` it writes is followed by a hint it was given, never by text.
#[test]
fn the_cli_prints_library_hints_only() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![src.clone()];
    let mut own = Vec::new();
    while let Some(path) = files.pop() {
        if path.is_dir() {
            for entry in std::fs::read_dir(&path).unwrap() {
                files.push(entry.unwrap().path());
            }
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for (at, _) in text.match_indices("hint: ") {
            let rest = &text[at + "hint: ".len()..];
            if !rest.starts_with('{') {
                let line = text[..at].lines().count();
                own.push(format!("{}:{line}", path.display()));
            }
        }
    }
    assert!(own.is_empty(), "hint text written by the CLI: {own:?}");
}
