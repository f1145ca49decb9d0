//! The tests' sandbox (`common::Sandbox`): every way a test starts `dsv` clears the
//! environment, so that a developer's `DSV_*`, `AWS_*`, `XDG_*` or `HOME` cannot change
//! what a test sees. Proven by running this test binary again, as a child, with junk in
//! its environment: the probe below then starts `dsv` every way the tests do.

use std::process::Stdio;

use crate::common::TestEnv;
use crate::remote::{unique_prefix, use_s3};

/// Set in the child's environment: the test runs as the probe.
const PROBE: &str = "DSV_TEST_SANDBOX_PROBE";

/// What a developer's shell might hold: each would change a run of `dsv` that saw it. The
/// paths are below `/dev/null`, where nothing (a `dsv init` that saw them) can create them.
const JUNK: [(&str, &str); 7] = [
    ("DSV_STORE", "/dev/null/store"),
    ("DSV_AUTHOR", "junk author"),
    ("AWS_PROFILE", "nope"),
    ("AWS_CONFIG_FILE", "/dev/null/aws-config"),
    ("AWS_SECRET_ACCESS_KEY", "junk-secret"),
    ("XDG_CONFIG_HOME", "/dev/null/xdg"),
    ("HOME", "/dev/null/home"),
];

#[test]
fn the_developers_environment_reaches_no_dsv_run() {
    if std::env::var_os(PROBE).is_some() {
        probe();
        return;
    }
    let name = "sandbox::the_developers_environment_reaches_no_dsv_run";
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--nocapture", "--test-threads", "1"])
        .envs(JUNK)
        .env(PROBE, "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "the probe failed:\n{text}");
    // The child ran the probe (not zero tests, as a renamed test would).
    assert!(text.contains("1 passed"), "{text}");
}

/// Starts `dsv` every way the tests do, in this (junk) environment, and checks that it saw
/// none of the junk.
fn probe() {
    let env = TestEnv::new();
    env.write("d/a.txt", "a\n");
    // TestEnv::dsv: the store is root's, not DSV_STORE's; the author is the sandbox's.
    env.ok(&["commit", "d", "-d", "ds"]);
    let log = env.json(&["log", "ds"]);
    assert_eq!(log[0]["author"], "tester", "{log}");
    // TestEnv::spawn.
    let listed = env
        .spawn(&["--json", "ls", "ds"])
        .wait_with_output()
        .unwrap();
    assert!(
        listed.status.success(),
        "spawn: {}",
        String::from_utf8_lossy(&listed.stderr)
    );
    // TestEnv::command, from another thread (Sandbox).
    let sandbox = env.sandbox();
    let status = std::thread::spawn(move || {
        sandbox
            .command()
            .args(["--json", "status", "d"])
            .stdout(Stdio::null())
            .status()
            .unwrap()
    })
    .join()
    .unwrap();
    assert!(status.success(), "command: {status}");
    // Sandbox::apply, for a program that runs dsv: its environment holds none of the junk.
    let mut shell = std::process::Command::new("bash");
    env.sandbox().apply(&mut shell);
    let seen = shell.args(["-c", "env"]).output().unwrap();
    let seen = String::from_utf8_lossy(&seen.stdout);
    for (key, value) in JUNK {
        assert!(
            !seen.contains(value),
            "{key}={value} reached the sandbox:\n{seen}"
        );
    }
    // S3 with the credentials the test sets, whatever AWS_PROFILE and AWS_CONFIG_FILE say.
    use_s3(&env);
    let url = format!("s3://dsv-test/{}", unique_prefix());
    env.ok(&["remote", "add", "origin", &url]);
    let pushed = env.command().args(["push", "ds"]).output().unwrap();
    assert!(
        pushed.status.success(),
        "push: {}",
        String::from_utf8_lossy(&pushed.stderr)
    );
}
