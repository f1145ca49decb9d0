//! Messages a git user hits (issue 34, B9): git's revision spellings, a revision where a
//! dataset name was expected, two arguments where one `REV:PATH` is, typos of tags and
//! datasets, and what a remote's refusal says.

use crate::common::TestEnv;

/// A store with dataset `mnist` of three versions (`a.txt` holding "1", "2", "3"), tagged
/// v1 and v3.
fn three_versions() -> TestEnv {
    let env = TestEnv::new();
    for n in ["1", "2", "3"] {
        env.write("data/a.txt", n);
        env.ok(&["commit", "data", "-d", "mnist", "-m", n]);
    }
    env.ok(&["tag", "mnist@latest~2", "v1"]);
    env.ok(&["tag", "mnist", "v3"]);
    env
}

#[test]
fn gits_head_caret_and_tilde_name_the_versions_before_the_head() {
    let env = three_versions();
    assert_eq!(env.ok(&["cat", "mnist@HEAD^:a.txt"]), "2");
    assert_eq!(env.ok(&["cat", "mnist@HEAD^^:a.txt"]), "1");
    assert_eq!(env.ok(&["cat", "mnist@HEAD~:a.txt"]), "2");
    assert_eq!(env.ok(&["cat", "mnist@HEAD~2:a.txt"]), "1");
    assert_eq!(env.ok(&["cat", "mnist@v3^:a.txt"]), "2");
    assert_eq!(env.ok(&["cat", "mnist^:a.txt"]), "2");
    let shown = env.json(&["show", "mnist@HEAD^"]);
    assert_eq!(shown["message"], "2", "{shown}");
    // A form dsv does not have names the forms it has.
    let said = env.fails(&["show", "mnist@{1}"], 3);
    assert!(
        said.contains("NAME@TAG") && said.contains("HEAD^"),
        "{said}"
    );
    let said = env.fails(&["show", "mnist@HEAD^2"], 3);
    assert!(said.contains("one parent"), "{said}");
}

#[test]
fn log_of_a_revision_starts_at_that_version() {
    let env = three_versions();
    let messages = |args: &[&str]| -> Vec<String> {
        env.json(args)
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["message"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(messages(&["log", "mnist"]), ["3", "2", "1"]);
    assert_eq!(messages(&["log", "mnist@v1"]), ["1"]);
    assert_eq!(messages(&["log", "mnist@HEAD^"]), ["2", "1"]);
    assert_eq!(messages(&["log", "mnist@v3", "-n", "1"]), ["3"]);
    let text = env.ok(&["log", "mnist@latest~1", "--oneline"]);
    assert_eq!(text.lines().count(), 2, "{text}");
    let said = env.fails(&["log", "mnist@v9"], 3);
    assert!(said.contains("unknown revision"), "{said}");
}

#[test]
fn diff_of_two_tags_suggests_the_revisions_of_the_dataset_that_has_them() {
    let env = three_versions();
    let said = env.fails(&["diff", "v1", "v3"], 3);
    assert!(said.contains("mnist@v1 mnist@v3"), "{said}");
    let error = env.json_error(&["diff", "v1", "v3"], 3);
    assert!(
        error["hints"][0]
            .as_str()
            .unwrap()
            .contains("did you mean mnist@v1 mnist@v3?"),
        "{error}"
    );
    // One tag alone (in any command) names the dataset's revision.
    let said = env.fails(&["show", "v1"], 3);
    assert!(said.contains("did you mean mnist@v1?"), "{said}");
    // The revisions themselves work.
    env.ok(&["diff", "mnist@v1", "mnist@v3"]);
}

#[test]
fn cat_with_the_path_as_a_second_argument_suggests_rev_colon_path() {
    let env = three_versions();
    let said = env.fails(&["cat", "mnist@v1", "a.txt"], 2);
    assert!(said.contains("dsv cat mnist@v1:a.txt"), "{said}");
    assert_eq!(env.ok(&["cat", "mnist@v1:a.txt"]), "1");
}

#[test]
fn an_unknown_tag_or_dataset_names_the_close_one() {
    let env = TestEnv::new();
    env.write("data/a.txt", "a");
    env.ok(&["commit", "data", "-d", "covid", "-m", "one"]);
    env.ok(&["tag", "covid", "v01"]);
    env.ok(&["tag", "covid", "v2"]);
    env.ok(&["tag", "covid", "release-2024"]);
    // v1 and v01 are one number: the tag is named, in the message and in the hint.
    let said = env.fails(&["show", "covid@v1"], 3);
    assert!(said.contains("did you mean covid@v01?"), "{said}");
    let error = env.json_error(&["cat", "covid@v1:a.txt"], 3);
    assert!(
        error["hints"][0]
            .as_str()
            .unwrap()
            .starts_with("did you mean covid@v01?"),
        "{error}"
    );
    // An edit away: a typo.
    let said = env.fails(&["show", "covid@relase-2024"], 3);
    assert!(said.contains("did you mean covid@release-2024?"), "{said}");
    // Another number is another version, not a typo: v3 suggests nothing (not v2).
    let said = env.fails(&["show", "covid@v3"], 3);
    assert!(!said.contains("did you mean"), "{said}");
    // Datasets: case and leading zeros, and edits.
    env.ok(&["commit", "data", "-d", "run07", "-m", "one"]);
    let said = env.fails(&["show", "run7"], 3);
    assert!(said.contains("did you mean run07?"), "{said}");
    let said = env.fails(&["show", "Covid"], 3);
    assert!(said.contains("did you mean covid?"), "{said}");
    let said = env.fails(&["show", "run8"], 3);
    assert!(!said.contains("did you mean"), "{said}");
}

/// A loopback server that answers every request with `403 Forbidden` (as something on the
/// instance metadata address does where no EC2 metadata service is), for up to 32
/// connections; returns its URL.
fn forbidding_server() -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(32) {
            let Ok(mut stream) = stream else { continue };
            let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(5)));
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let _ = stream.write_all(
                b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    });
    format!("http://127.0.0.1:{port}")
}

fn joined(error: &serde_json::Value) -> String {
    let mut text = error["message"].as_str().unwrap_or_default().to_string();
    for part in ["causes", "hints"] {
        for line in error[part].as_array().into_iter().flatten() {
            text.push('\n');
            text.push_str(line.as_str().unwrap_or_default());
        }
    }
    text
}

#[test]
fn with_no_credentials_at_all_the_error_says_none_were_found_and_where_it_looked() {
    let env = TestEnv::new();
    // No AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, no profile files: object_store's last
    // resort is the instance metadata service, which answers 403 here.
    crate::remote::use_s3_anonymously(&env);
    env.set_var("AWS_METADATA_ENDPOINT", &forbidding_server());
    let url = format!("s3://dsv-test/{}", crate::remote::unique_prefix());
    let error = env.json_error(&["remote", "add", "origin", &url], 3);
    let said = joined(&error);
    assert!(!said.contains("refused the credentials"), "{said}");
    let hint = error["hints"][0].as_str().unwrap();
    assert!(hint.contains("no AWS credentials were found"), "{said}");
    for place in [
        "AWS_ACCESS_KEY_ID",
        "~/.aws/credentials",
        "instance metadata",
    ] {
        assert!(hint.contains(place), "{place}: {said}");
    }
    assert_eq!(env.json(&["remote", "ls"]), serde_json::json!([]));
    // Added unchecked, the first fetch says the same.
    env.ok(&["remote", "add", "origin", &url, "--no-check"]);
    let error = env.json_error(&["fetch"], 3);
    assert!(
        error["hints"][0]
            .as_str()
            .unwrap()
            .contains("no AWS credentials were found"),
        "{error}"
    );
}

#[test]
fn remote_add_refuses_a_missing_bucket_unless_no_check() {
    let env = TestEnv::new();
    crate::remote::use_s3(&env);
    let prefix = crate::remote::unique_prefix();
    let typo = format!("s3://dsv-tset/{prefix}");
    let out = env.run(&["remote", "add", "origin", &typo]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("NoSuchBucket: the bucket dsv-tset does not exist"),
        "{said}"
    );
    assert!(
        said.contains(
            "hint: the bucket (or container) does not exist, and the remote was not added"
        ),
        "{said}"
    );
    assert_eq!(env.json(&["remote", "ls"]), serde_json::json!([]));
    // --no-check adds it without a request.
    env.ok(&["remote", "add", "origin", &typo, "--no-check"]);
    // An existing bucket (the prefix need not exist) is accepted.
    env.ok(&["remote", "add", "real", &format!("s3://dsv-test/{prefix}")]);
    // A file:// remote is never contacted: its directory is made.
    let dir = env.path("later/remote");
    env.ok(&[
        "remote",
        "add",
        "local",
        &format!("file://{}", dir.display()),
    ]);
    assert!(dir.is_dir());
}

#[test]
fn a_missing_bucket_is_named_by_its_code_not_shown_as_xml() {
    let env = TestEnv::new();
    crate::remote::use_s3(&env);
    env.write("data/a.txt", "a");
    env.ok(&["commit", "data", "-d", "ds"]);
    env.ok(&[
        "remote",
        "add",
        "origin",
        "s3://no-such-bucket-here/x",
        "--no-check",
    ]);
    let out = env.run(&["push"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        !said.contains("<?xml") && !said.contains("<Error>"),
        "{said}"
    );
    assert!(
        said.contains("NoSuchBucket: the bucket no-such-bucket-here does not exist"),
        "{said}"
    );
}
