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
    assert!(said.contains("NAME@TAG") && said.contains("HEAD^"), "{said}");
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
