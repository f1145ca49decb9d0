//! What commands tell (issue 34): when `gc --remote` frees space, `push` dataset by dataset,
//! renames in `diff` and `status`.

use std::time::{Duration, SystemTime};

use insta::assert_snapshot;
use serde_json::Value;

use crate::common::{TestEnv, pseudo_random};

/// A time of a report (RFC 3339).
fn time(value: &Value) -> SystemTime {
    humantime::parse_rfc3339(value.as_str().unwrap_or_else(|| panic!("a time: {value}")))
        .unwrap_or_else(|e| panic!("{value}: {e}"))
}

/// `t` lies in `from..=from + slack`.
fn within(t: SystemTime, from: SystemTime, slack: Duration, what: &str) {
    assert!(
        t >= from && t <= from + slack,
        "{what}: {} not within {} + {slack:?}",
        humantime::format_rfc3339(t),
        humantime::format_rfc3339(from)
    );
}

/// The human output of `dsv ARGS` with its times, ids and sizes normalized.
fn gc_text(env: &TestEnv, args: &[&str]) -> String {
    let text = env.normalize(&env.ok(args));
    let mut text = regex::Regex::new(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC")
        .unwrap()
        .replace_all(&text, "[TIME]")
        .into_owned();
    text = regex::Regex::new(r"\d+(\.\d+)? (B|KiB|MiB)")
        .unwrap()
        .replace_all(&text, "[SIZE]")
        .into_owned();
    text
}

/// A store whose remote `origin` (a directory) holds one pack no ref names any more.
fn remote_with_garbage() -> TestEnv {
    let env = TestEnv::new();
    let url = format!("file://{}/remote", env.root().display());
    env.ok(&["remote", "add", "origin", &url]);
    env.write("a/own.bin", pseudo_random(200_000, 34));
    env.ok(&["commit", "a", "-d", "drop", "-m", "v", "-q"]);
    env.ok(&["push", "-q"]);
    env.json(&["rm", "--remote", "origin", "drop"]);
    env
}

/// Every run and dry run of `gc --remote` says how many bytes it freed and when the rest
/// frees (the remote's clock, RFC 3339 in `--json`): a young pack (marked a grace after its
/// upload, deleted a grace after that), a pack to mark, a marked pack, one deletable now.
#[test]
fn remote_gc_says_how_many_bytes_free_and_from_when() {
    let env = remote_with_garbage();
    let day = Duration::from_secs(24 * 3600);
    let minute = Duration::from_secs(60);

    // Just uploaded: younger than the default grace of 24 h.
    let young = env.json(&["gc", "--remote", "origin"]);
    let now = time(&young["server_time"]);
    let bytes = young["young"]["bytes"].as_u64().unwrap();
    assert!(bytes > 100_000, "{young:#}");
    assert_eq!(young["freed_bytes"], 0, "{young:#}");
    assert_eq!(young["pending_bytes"], bytes, "{young:#}");
    let free = &young["frees"][0];
    assert_eq!(
        (
            free["state"].as_str(),
            free["count"].as_u64(),
            free["bytes"].as_u64()
        ),
        (Some("young"), Some(1), Some(bytes)),
        "{young:#}"
    );
    within(
        time(&free["marks_after"]),
        now + day - minute,
        2 * minute,
        "marks_after",
    );
    within(
        time(&free["frees_after"]),
        now + 2 * day - minute,
        4 * minute,
        "frees_after",
    );
    assert_snapshot!(gc_text(&env, &["gc", "--remote", "origin", "--dry-run"]), @"
    Would mark 0 packs ([SIZE]), would delete 0 packs ([SIZE]), would rescue 0 packs, would repack 0 packs on remote origin; kept 0 packs ([SIZE]) for 0 refs
      wait (unreferenced, younger than the grace) [SHORT] (a run after [TIME] frees it)
    grace 24h; the remote's clock: [TIME]
    frees nothing (--dry-run)
    [SIZE] in 1 pack younger than the grace: a run after [TIME] marks it, a run a grace after that (from [TIME]) frees it, if no ref names it by then
    ");

    // With a grace of 8 s (a run taking more than half of it defers its deletions, and the
    // marked pack's dry run must start within it of the mark: room on a loaded machine), past
    // it (the remote's packs backdated, no wait): a dry run says a run marks it now and frees
    // it a grace later; the run marks it and says when.
    crate::remote_gc::backdate(&env.path("remote"), Duration::from_millis(9500));
    let grace = Duration::from_secs(8);
    let planned = env.json(&["gc", "--remote", "origin", "--grace", "8s", "--dry-run"]);
    let free = &planned["frees"][0];
    assert_eq!(free["state"], "unmarked", "{planned:#}");
    within(
        time(&free["frees_after"]),
        time(&planned["server_time"]) + grace,
        2 * minute,
        "unmarked",
    );
    let marked = env.json(&["gc", "--remote", "origin", "--grace", "8s"]);
    assert_eq!(marked["marked"]["bytes"], bytes, "{marked:#}");
    let free = &marked["frees"][0];
    assert_eq!(
        (free["state"].as_str(), free["bytes"].as_u64()),
        (Some("marked"), Some(bytes)),
        "{marked:#}"
    );
    within(
        time(&free["frees_after"]),
        time(&marked["server_time"]) + grace,
        2 * minute,
        "marked",
    );
    let waiting = gc_text(
        &env,
        &["gc", "--remote", "origin", "--grace", "8s", "--dry-run"],
    );
    assert_snapshot!(waiting, @"
    Would mark 0 packs ([SIZE]), would delete 0 packs ([SIZE]), would rescue 0 packs, would repack 0 packs on remote origin; kept 0 packs ([SIZE]) for 0 refs
      wait (marked, grace not over) [SHORT] (a run after [TIME] frees it)
    grace 8s; the remote's clock: [TIME]
    frees nothing (--dry-run)
    [SIZE] in 1 pack: a run after [TIME] frees it
    ");

    // Past the mark's grace (backdated): a dry run says a run now frees it, the run frees it.
    crate::remote_gc::backdate(&env.path("remote"), Duration::from_millis(9500));
    let due = env.json(&["gc", "--remote", "origin", "--grace", "8s", "--dry-run"]);
    assert_eq!(
        (
            due["frees"][0]["state"].as_str(),
            due["pending_bytes"].as_u64()
        ),
        (Some("now"), Some(bytes)),
        "{due:#}"
    );
    // A run slowed past half the grace defers its deletions to the next run: run again
    // (bounded), as a user would.
    let mut text = String::new();
    for _ in 0..3 {
        text = gc_text(&env, &["gc", "--remote", "origin", "--grace", "8s"]);
        if !text.contains("deletions left to the next run") {
            break;
        }
    }
    assert_snapshot!(text, @"
    Marked 0 packs ([SIZE]), deleted 1 pack ([SIZE]), rescued 0 packs, repacked 0 packs on remote origin; kept 0 packs ([SIZE]) for 0 refs
      delete [SHORT]
    grace 8s; the remote's clock: [TIME]
    freed [SIZE] now
    ");
    let after = env.json(&["gc", "--remote", "origin", "--grace", "8s"]);
    assert_eq!(
        (
            after["pending_bytes"].as_u64(),
            after["frees"].as_array().map(Vec::len)
        ),
        (Some(0), Some(0)),
        "{after:#}"
    );
}

/// The human output of `dsv ARGS` (exit code, stdout, stderr), normalized.
fn human(env: &TestEnv, args: &[&str]) -> String {
    let out = env.run(args);
    let text = format!(
        "exit: {}\n--- stdout\n{}--- stderr\n{}",
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    env.normalize(&text)
}

/// `dsv --json ARGS`, expecting exit `code`; the JSON on stdout.
fn json_with_code(env: &TestEnv, args: &[&str], code: i32) -> Value {
    let mut full = vec!["--json"];
    full.extend_from_slice(args);
    let out = env.run(&full);
    assert_eq!(
        out.status.code(),
        Some(code),
        "dsv {args:?}\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

/// One dataset's entry of a push report.
fn pushed<'a>(report: &'a Value, dataset: &str) -> &'a Value {
    report["datasets"]
        .as_array()
        .unwrap_or_else(|| panic!("no datasets: {report:#}"))
        .iter()
        .find(|d| d["dataset"] == dataset)
        .unwrap_or_else(|| panic!("no {dataset}: {report:#}"))
}

/// The heads remote `origin` holds now (fetched), by dataset.
fn remote_heads(env: &TestEnv) -> std::collections::BTreeMap<String, String> {
    env.ok(&["fetch", "-q"]);
    let remotes = env.json(&["remote", "ls"]);
    remotes[0]["refs"]
        .as_array()
        .unwrap_or_else(|| panic!("{remotes:#}"))
        .iter()
        .filter(|r| r["tag"].is_null())
        .map(|r| {
            (
                r["dataset"].as_str().unwrap().to_string(),
                r["version"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Each dataset is pushed on its own: one behind the remote is refused (exit 4, the error
/// and its hint said, `behind` in JSON) while the others go up; several revisions are
/// accepted, two of one dataset are not.
fn push_dataset_by_dataset(s3: bool) {
    let env = TestEnv::new();
    let url = if s3 {
        crate::remote::use_s3(&env);
        format!("s3://dsv-test/{}", crate::remote::unique_prefix())
    } else {
        format!("file://{}/remote", env.root().display())
    };
    env.ok(&["remote", "add", "origin", &url]);
    for (dataset, seed) in [("alpha", 1), ("beta", 2), ("gamma", 3)] {
        env.write(&format!("{dataset}/f.bin"), pseudo_random(1000, seed));
        env.ok(&["commit", dataset, "-d", dataset, "-m", "one", "-q"]);
    }
    env.write("beta/g.bin", pseudo_random(1000, 4));
    env.ok(&["commit", "beta", "-d", "beta", "-m", "two", "-q"]);
    env.ok(&["push", "-q"]);
    // beta's local head goes back one version: the remote is ahead of it. alpha moves on.
    env.ok(&["reset", "beta", "latest~1"]);
    env.write("alpha/h.bin", pseudo_random(1000, 5));
    env.ok(&["commit", "alpha", "-d", "alpha", "-m", "two", "-q"]);
    let alpha_head = env.json(&["log", "alpha"])[0]["id"]
        .as_str()
        .unwrap()
        .to_string();

    let report = json_with_code(&env, &["push"], 4);
    assert_eq!(pushed(&report, "alpha")["status"], "pushed", "{report:#}");
    assert_eq!(
        pushed(&report, "gamma")["status"],
        "up-to-date",
        "{report:#}"
    );
    let beta = pushed(&report, "beta");
    assert_eq!(beta["status"], "behind", "{report:#}");
    assert!(
        beta["error"]
            .as_str()
            .unwrap()
            .contains("is behind the head"),
        "{report:#}"
    );
    assert!(
        beta["hint"].as_str().unwrap().contains("--force"),
        "{report:#}"
    );
    assert_eq!(report["refused"], 1, "{report:#}");
    // The error object every failing command has, naming the refusal.
    assert!(
        report["error"]["message"]
            .as_str()
            .unwrap()
            .contains("beta"),
        "{report:#}"
    );
    assert_eq!(remote_heads(&env)["alpha"], alpha_head);

    // Several revisions, one per dataset.
    env.write("gamma/h.bin", pseudo_random(1000, 6));
    env.ok(&["commit", "gamma", "-d", "gamma", "-m", "two", "-q"]);
    let two = json_with_code(&env, &["push", "alpha", "gamma@latest"], 0);
    let names: Vec<&str> = two["datasets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["dataset"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alpha", "gamma"], "{two:#}");
    assert_eq!(pushed(&two, "gamma")["status"], "pushed", "{two:#}");
    env.fails(&["push", "alpha", "alpha@latest~1"], 3);
    if !s3 {
        let text = human(&env, &["push"]);
        assert_snapshot!(text, @"
        exit: 4
        --- stdout
        origin/alpha  [SHORT]..[SHORT]  up-to-date
        origin/gamma  [SHORT]..[SHORT]  up-to-date
        origin/beta   [SHORT]                refused (behind; the remote's head is [SHORT])
        3 datasets: 0 pushed, 2 up to date, 1 refused
        uploaded 0 B in 0 packs, 6 requests
        --- stderr
        error: beta@[SHORT] is behind the head of \"beta\" on remote \"origin\": pushing it would move that head back

        hint: the remote already has newer versions of beta on this line; `dsv push beta@VERSION --remote origin --force` rewinds its head (they stay in its history)
        ");
    }
}

#[test]
fn push_refuses_a_dataset_behind_the_remote_and_pushes_the_others_file() {
    push_dataset_by_dataset(false);
}

#[test]
fn push_refuses_a_dataset_behind_the_remote_and_pushes_the_others_s3() {
    push_dataset_by_dataset(true);
}

/// An ImageFolder relabel: files moved between class directories are renames in `diff` and
/// `status` (`R old -> new`, `renamed` with `from`/`to` in JSON), paired by content id and
/// mode, deterministically (same file name first, then path order); an empty file and a
/// file whose mode changed are not paired; `--no-renames` lists deletions and additions.
#[test]
fn diff_and_status_detect_renames_by_content_id() {
    use std::os::unix::fs::PermissionsExt;
    let env = TestEnv::new();
    env.write("ds/cat/1.jpg", pseudo_random(3000, 1));
    env.write("ds/cat/2.jpg", pseudo_random(3000, 2));
    env.write("ds/dog/3.jpg", pseudo_random(3000, 3));
    env.write("ds/copies/x.bin", "the same\n");
    env.write("ds/copies/y.bin", "the same\n");
    env.write("ds/empty.txt", "");
    env.write("ds/tool.sh", "echo hi\n");
    env.ok(&["commit", "ds", "-d", "ds", "-m", "one", "-q"]);
    // Relabel: cat/2.jpg is a dog.
    std::fs::create_dir_all(env.path("ds/dog")).unwrap();
    std::fs::rename(env.path("ds/cat/2.jpg"), env.path("ds/dog/2.jpg")).unwrap();
    // Two files of one content move: x keeps its name, y becomes z.
    std::fs::create_dir_all(env.path("ds/moved")).unwrap();
    std::fs::rename(env.path("ds/copies/x.bin"), env.path("ds/moved/x.bin")).unwrap();
    std::fs::rename(env.path("ds/copies/y.bin"), env.path("ds/moved/z.bin")).unwrap();
    // An empty file moved, and a file moved that became executable: no renames.
    std::fs::rename(env.path("ds/empty.txt"), env.path("ds/empty2.txt")).unwrap();
    std::fs::rename(env.path("ds/tool.sh"), env.path("ds/bin.sh")).unwrap();
    std::fs::set_permissions(
        env.path("ds/bin.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    crate::common::settle(&env);

    let status = env.json(&["status", "ds"]);
    let renames: Vec<(String, String)> = status["changes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["change"] == "renamed")
        .map(|c| {
            assert_eq!(c["path"], c["to"], "{c}");
            assert_eq!(c["old"]["path"], c["from"], "{c}");
            assert_eq!(c["old"]["id"], c["new"]["id"], "{c}");
            (
                c["from"].as_str().unwrap().into(),
                c["to"].as_str().unwrap().into(),
            )
        })
        .collect();
    let expected: Vec<(String, String)> = [
        ("cat/2.jpg", "dog/2.jpg"),
        ("copies/x.bin", "moved/x.bin"),
        ("copies/y.bin", "moved/z.bin"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(renames, expected, "{status:#}");
    assert_snapshot!(human(&env, &["status", "ds"]), @"
    exit: 0
    --- stdout
    [ROOT]/ds differs from ds@[SHORT]:
    A bin.sh
    R cat/2.jpg -> dog/2.jpg
    D empty.txt
    A empty2.txt
    R copies/x.bin -> moved/x.bin
    R copies/y.bin -> moved/z.bin
    D tool.sh
    --- stderr
    ");
    let plain = env.json(&["status", "ds", "--no-renames"]);
    assert!(
        plain["changes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["change"] != "renamed" && c.get("from").is_none()),
        "{plain:#}"
    );
    assert_eq!(plain["changes"].as_array().unwrap().len(), 10, "{plain:#}");

    env.ok(&["commit", "ds", "-d", "ds", "-m", "relabel", "-q"]);
    let diff = env.json(&["diff", "ds"]);
    let diffed: Vec<(String, String)> = diff["changes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["change"] == "renamed")
        .map(|c| {
            (
                c["from"].as_str().unwrap().into(),
                c["to"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(diffed, expected, "{diff:#}");
    assert_snapshot!(human(&env, &["diff", "ds"]), @"
    exit: 0
    --- stdout
    A bin.sh
    R cat/2.jpg -> dog/2.jpg
    D empty.txt
    A empty2.txt
    R copies/x.bin -> moved/x.bin
    R copies/y.bin -> moved/z.bin
    D tool.sh
    --- stderr
    ");
    assert_snapshot!(human(&env, &["diff", "ds", "--stat"]), @"
    exit: 0
    --- stdout
     bin.sh                      | - → 8 B
     cat/2.jpg -> dog/2.jpg      | 2.93 KiB → 2.93 KiB
     empty.txt                   | 0 B → -
     empty2.txt                  | - → 0 B
     copies/x.bin -> moved/x.bin | 9 B → 9 B
     copies/y.bin -> moved/z.bin | 9 B → 9 B
     tool.sh                     | 8 B → -
    7 files changed: 2 added, 0 modified, 2 deleted, 3 renamed; 2.96 KiB → 2.96 KiB
    --- stderr
    ");
    let plain = env.json(&["diff", "ds", "--no-renames"]);
    assert_eq!(
        plain["changes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["change"] == "renamed")
            .count(),
        0,
        "{plain:#}"
    );
    assert_eq!(plain["changes"].as_array().unwrap().len(), 10, "{plain:#}");
}

/// README.md's `## Status` section says what the CLI does: every option it names in
/// backticks (`` `gc --remote` ``, `` `tag -d --remote` ``) is in that command's `--help`, and
/// what ships (remote cleanup: `dsv gc --remote`) is not called planned; the section
/// explains the grace that protects a remote's writers.
#[test]
fn readme_status_section_matches_the_cli() {
    let readme =
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
            .unwrap();
    let start = readme.find("\n## Status\n").expect("a ## Status section");
    let section = &readme[start + 1..];
    let section = &section[..section[1..].find("\n## ").map_or(section.len(), |e| e + 1)];
    let (shipped, planned) = section
        .split_once("\nPlanned:")
        .expect("a Planned: paragraph");
    let env = TestEnv::bare();
    // Every `COMMAND ... --OPTION` span names options the command has.
    let mut checked = 0;
    for span in section.split('`').skip(1).step_by(2) {
        let mut words: Vec<&str> = span.split_whitespace().collect();
        if words.first() == Some(&"dsv") {
            words.remove(0);
        }
        let Some(first_option) = words.iter().position(|w| w.starts_with('-')) else {
            continue;
        };
        if first_option == 0 {
            continue;
        }
        let mut help_args: Vec<&str> = words[..first_option].to_vec();
        help_args.push("--help");
        let help = env.ok(&help_args);
        for option in words[first_option..].iter().filter(|w| w.starts_with('-')) {
            let option = option.split('=').next().unwrap();
            assert!(
                help.split(|c: char| !(c.is_alphanumeric() || c == '-'))
                    .any(|w| w == option),
                "README.md's status section names `{span}`, but `dsv {}` has no {option}",
                help_args.join(" ")
            );
            checked += 1;
        }
    }
    assert!(checked >= 3, "too few options checked: {checked}");
    // Remote cleanup ships: the section says so, explains the grace, and does not plan it.
    let gc_help = env.ok(&["gc", "--help"]);
    assert!(gc_help.contains("--remote"), "{gc_help}");
    assert!(
        shipped.contains("`gc --remote`"),
        "README.md's status section does not list `gc --remote` as shipped"
    );
    assert!(
        shipped.contains("grace") && shipped.contains("no lock"),
        "README.md's status section does not explain that a grace, not a lock, protects a remote's writers"
    );
    let planned = planned.to_lowercase();
    for phrase in ["remote", "unreferenced", "garbage"] {
        assert!(
            !planned.contains(phrase),
            "README.md's Planned: paragraph mentions {phrase:?}, but remote cleanup ships (`dsv gc --remote`)"
        );
    }
}
