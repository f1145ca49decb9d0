//! What dsv draws on a terminal: progress bars and spinners on a pseudo-terminal (run under
//! util-linux `script`, which scripts/test installs), nothing when output is piped or with
//! `--no-progress`, and no color codes with `NO_COLOR`.

use std::process::Command;

use crate::common::TestEnv;

/// 600 small files in 30 directories: enough for checkout to draw its bar, quick to make.
fn many_files(env: &TestEnv) {
    for i in 0..600 {
        env.write(
            &format!("data/d{:02}/f{i:05}.txt", i % 30),
            format!("row {i}\n").repeat(200),
        );
    }
    env.ok(&["commit", "data", "-d", "ds"]);
}

/// Runs dsv with `args` on a pseudo-terminal (stdin, stdout and stderr all on it) and
/// returns everything it wrote there, escape sequences included.
fn on_terminal(env: &TestEnv, args: &[&str], vars: &[(&str, &str)]) -> String {
    let dsv = crate::common::dsv_binary();
    let command = std::iter::once(dsv.to_str().unwrap())
        .chain(args.iter().copied())
        .collect::<Vec<_>>()
        .join(" ");
    let mut script = Command::new("script");
    env.sandbox().apply(&mut script);
    script
        .args(["-qfec", &command, "/dev/null"])
        .env("TERM", "xterm-256color")
        .stdin(std::process::Stdio::null());
    for (key, value) in vars {
        script.env(key, value);
    }
    let out = script
        .output()
        .expect("util-linux `script` (scripts/test installs it)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{command}: {text}");
    text
}

/// An SGR (color, bold...) escape sequence; indicatif's cursor moves and line clears are not.
fn has_color(text: &str) -> bool {
    regex::Regex::new(r"\x1b\[[0-9;]*m").unwrap().is_match(text)
}

#[test]
fn progress_is_drawn_on_a_terminal_only() {
    let env = TestEnv::new();
    many_files(&env);

    // On a terminal: a spinner for the stretches without a total, then the bar, counting
    // files as well as bytes, all cleared before the report.
    let drawn = on_terminal(&env, &["checkout", "ds", "out1"], &[]);
    assert!(drawn.contains("reading the version..."), "{drawn:?}");
    assert!(drawn.contains("writing ["), "{drawn:?}");
    assert!(drawn.contains("/600 files, "), "{drawn:?}");
    assert!(drawn.contains("\x1b[2K"), "the bar is cleared: {drawn:?}");
    assert!(drawn.contains("Checked out ds@"), "{drawn:?}");

    // Piped: the report only, no bar and no escape sequence on either stream.
    let piped = env.run(&["checkout", "ds", "out2"]);
    assert!(piped.status.success());
    assert!(
        piped.stderr.is_empty(),
        "{:?}",
        String::from_utf8_lossy(&piped.stderr)
    );
    assert!(!String::from_utf8_lossy(&piped.stdout).contains('\x1b'));

    // --no-progress on a terminal: the report only.
    let quiet = on_terminal(&env, &["--no-progress", "checkout", "ds", "out3"], &[]);
    assert!(!quiet.contains('\x1b'), "{quiet:?}");
    assert!(!quiet.contains("writing"), "{quiet:?}");
    assert!(quiet.starts_with("Checked out ds@"), "{quiet:?}");

    // Log output is colored on a terminal, and not with NO_COLOR.
    let log = [("DSV_LOG", "dsv=debug")];
    let colored = on_terminal(&env, &["commit", "data", "-d", "c1"], &log);
    assert!(colored.contains("walked"), "{colored:?}");
    assert!(has_color(&colored), "{colored:?}");
    let plain = on_terminal(
        &env,
        &["commit", "data", "-d", "c2"],
        &[log[0], ("NO_COLOR", "1")],
    );
    assert!(plain.contains("walked"), "{plain:?}");
    assert!(!has_color(&plain), "{plain:?}");
    // Nor when stderr is piped (a log file).
    env.set_var("DSV_LOG", "dsv=debug");
    let piped = env.run(&["commit", "data", "-d", "c3"]);
    let logged = String::from_utf8_lossy(&piped.stderr);
    assert!(logged.contains("walked"), "{logged:?}");
    assert!(!has_color(&logged), "{logged:?}");
}
