//! Reading from the nearest copy (issue 27, part 2): a store with several remotes asks them
//! in its read order (`dsv remote add --first`, `dsv remote order`) and falls back to the
//! next on a miss or a failure, for checkout, pull, `cat` (the read engine) and a mount or
//! Python read (in `mount.rs` and `python/tests`). The remotes are real: moto's S3 server,
//! an S3 endpoint on a loopback port where nothing listens, and `file://` directories that
//! vanish or hold a damaged pack.

use std::path::Path;

use serde_json::Value;

use crate::common::{TestEnv, assert_same_tree, damage_first_pack, pseudo_random};
use crate::remote::{unique_prefix, use_s3};

/// A loopback port where nothing listens (bound, then let go).
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Adds remote `name` to `env`: an S3 URL whose endpoint is a closed loopback port, without
/// retries and with a short connect timeout, so every request fails at once.
pub(crate) fn add_unreachable(env: &TestEnv, name: &str, first: bool) {
    let endpoint = format!("aws_endpoint=http://127.0.0.1:{}", closed_port());
    let url = format!("s3://dsv-test/{}", unique_prefix());
    let mut args = vec![
        "remote",
        "add",
        name,
        &url,
        "--option",
        &endpoint,
        "--option",
        "aws_allow_http=true",
        "--option",
        "max_retries=0",
        "--option",
        "connect_timeout=2s",
        "--no-check",
    ];
    if first {
        args.push("--first");
    }
    env.ok(&args);
}

/// Files of a few frames: a multi-chunk file and small ones.
pub(crate) fn dataset(env: &TestEnv, dir: &str, seed: u64) {
    env.write(&format!("{dir}/big.bin"), pseudo_random(3_000_000, seed));
    for i in 0..5u64 {
        env.write(
            &format!("{dir}/small/{i}.txt"),
            format!("row {i} of {seed}\n").repeat(50),
        );
    }
}

/// `(remote, objects, error)` of each entry of a transfer's `remotes`.
fn served(transfer: &Value) -> Vec<(String, u64, Option<String>)> {
    transfer["remotes"]
        .as_array()
        .unwrap_or_else(|| panic!("no remotes in {transfer}"))
        .iter()
        .map(|r| {
            (
                r["remote"].as_str().unwrap().to_string(),
                r["objects"].as_u64().unwrap(),
                r["error"].as_str().map(str::to_string),
            )
        })
        .collect()
}

/// The read order `remote ls --json` shows: (name, position).
fn read_order(env: &TestEnv) -> Vec<(String, u64)> {
    env.json(&["remote", "ls"])
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_string(),
                r["position"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn names(order: &[(&str, u64)]) -> Vec<(String, u64)> {
    order.iter().map(|(n, p)| (n.to_string(), *p)).collect()
}

#[test]
fn remote_add_appends_first_puts_first_and_order_moves_remotes_to_the_front() {
    let env = TestEnv::new();
    let dir = |name: &str| format!("file://{}/{name}", env.root().display());
    env.ok(&["remote", "add", "origin", &dir("origin")]);
    env.ok(&["remote", "add", "backup", &dir("backup")]);
    assert_eq!(read_order(&env), names(&[("origin", 1), ("backup", 2)]));
    let added = env.json(&["remote", "add", "near", &dir("near"), "--first"]);
    assert_eq!(added["position"], 1, "{added}");
    assert_eq!(
        read_order(&env),
        names(&[("near", 1), ("origin", 2), ("backup", 3)])
    );
    let ordered = env.json(&["remote", "order", "backup", "origin"]);
    let listed: Vec<&str> = ordered
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["backup", "origin", "near"]);
    assert_eq!(
        env.ok(&["remote", "order", "near"]).trim(),
        "Read order: near, backup, origin"
    );
    // An unknown name changes nothing.
    let error = env.json_error(&["remote", "order", "nope", "origin"], 3);
    assert!(
        error["message"].as_str().unwrap().contains("nope"),
        "{error}"
    );
    env.ok(&["remote", "rm", "backup"]);
    assert_eq!(read_order(&env), names(&[("near", 1), ("origin", 2)]));
    // The default remote of push, pull and fetch is still origin, not the first read.
    let pulled = env.json_error(&["pull", "ds"], 3);
    assert!(
        !pulled["message"].as_str().unwrap().contains("near"),
        "{pulled}"
    );
    // `dsv repair` restores the order from the ref log.
    std::fs::remove_file(env.path(".dsv/catalog.db")).unwrap();
    env.ok(&["repair"]);
    assert_eq!(read_order(&env), names(&[("near", 1), ("origin", 2)]));
}

/// A loopback endpoint that accepts every connection and closes it at once, counting them:
/// a remote there fails every request, and the count tells whether it was asked at all.
struct Refusing {
    port: u16,
    accepted: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Refusing {
    fn start() -> Refusing {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = accepted.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                drop(stream);
            }
        });
        Refusing { port, accepted }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Adds it to `env` as remote `name`, read first (no retries).
    fn add(&self, env: &TestEnv, name: &str) {
        let endpoint = format!("aws_endpoint=http://127.0.0.1:{}", self.port);
        let url = format!("s3://dsv-test/{}", unique_prefix());
        env.ok(&[
            "remote",
            "add",
            name,
            &url,
            "--option",
            &endpoint,
            "--option",
            "aws_allow_http=true",
            "--option",
            "max_retries=0",
            "--first",
            "--no-check",
        ]);
    }
}

/// A remote that fails every request, read first: checkout, `cat` and pull get everything
/// from the next remote; a pull asks the remote it names first; once the failing remote is
/// read last, nothing contacts it.
#[test]
fn reads_fall_back_from_a_failing_remote_and_skip_it_when_read_last() {
    let writer = TestEnv::new();
    use_s3(&writer);
    let url = format!("s3://dsv-test/{}", unique_prefix());
    dataset(&writer, "data", 1);
    let v1 = commit(&writer);
    writer.ok(&["remote", "add", "origin", &url]);
    writer.ok(&["push"]);

    let reader = TestEnv::new();
    use_s3(&reader);
    reader.ok(&["remote", "add", "origin", &url]);
    reader.ok(&["fetch"]);
    let down = Refusing::start();
    down.add(&reader, "down");
    assert_eq!(read_order(&reader), names(&[("down", 1), ("origin", 2)]));

    // checkout of a local revision: down is asked first, fails, origin serves.
    reader.ok(&["checkout", &format!("ds@{v1}"), "out"]);
    assert_same_tree(&writer.path("data"), &reader.path("out"));
    let asked = down.accepted();
    assert!(asked > 0, "the remote read first was never asked");

    // cat of a file pushed since: the read engine gets it from origin.
    writer.write("data/later.txt", "later\n");
    let later = commit(&writer);
    writer.ok(&["push"]);
    reader.ok(&["fetch"]);
    assert_eq!(
        reader.ok(&["cat", &format!("ds@{later}:later.txt")]),
        "later\n"
    );

    // pull asks the remote it names (origin) first: it serves all, down is not asked.
    writer.write("data/new.bin", pseudo_random(500_000, 9));
    commit(&writer);
    writer.ok(&["push"]);
    let before = down.accepted();
    let pull = reader.json(&["pull", "ds"]);
    let got = served(&pull["transfer"]);
    assert_eq!(got.len(), 1, "{pull}");
    assert_eq!((got[0].0.as_str(), got[0].2.as_deref()), ("origin", None));
    assert!(got[0].1 > 0, "{got:?}");
    assert_eq!(down.accepted(), before);
    reader.ok(&["checkout", "ds", "out2"]);
    assert_same_tree(&writer.path("data"), &reader.path("out2"));

    // Read last, the failing remote is never asked: origin serves everything.
    reader.ok(&["remote", "order", "origin"]);
    assert_eq!(read_order(&reader), names(&[("origin", 1), ("down", 2)]));
    writer.write("data/last.bin", pseudo_random(400_000, 10));
    let last = commit(&writer);
    writer.ok(&["push"]);
    reader.ok(&["fetch"]);
    let before = down.accepted();
    reader.ok(&["checkout", &format!("ds@{last}"), "out3"]);
    assert_same_tree(&writer.path("data"), &reader.path("out3"));
    assert_eq!(down.accepted(), before, "the remote read last was asked");
}

/// An S3 endpoint where nothing listens, read first: a checkout of a revision on it fails
/// (its refs are needed), and one of a revision on origin asks origin first, never it.
#[test]
fn a_remote_revision_asks_the_remote_it_names_first() {
    let writer = TestEnv::new();
    use_s3(&writer);
    let url = format!("s3://dsv-test/{}", unique_prefix());
    dataset(&writer, "data", 6);
    commit(&writer);
    writer.ok(&["remote", "add", "origin", &url]);
    writer.ok(&["push"]);
    let reader = TestEnv::new();
    use_s3(&reader);
    reader.ok(&["remote", "add", "origin", &url]);
    add_unreachable(&reader, "down", true);
    let error = reader.json_error(&["checkout", "down/ds", "out"], 6);
    assert!(
        error["message"].as_str().unwrap().contains("down"),
        "{error}"
    );
    // Named remote first, then read order: origin after the unreachable one.
    let checkout = reader.json(&["checkout", "origin/ds", "out"]);
    assert_same_tree(&writer.path("data"), &reader.path("out"));
    let got = served(&checkout["remote"]["transfer"]);
    assert_eq!(got.len(), 1, "{checkout}");
    assert_eq!(got[0].0, "origin");
}

/// Commits `data` to dataset `ds`; the version's id.
pub(crate) fn commit(env: &TestEnv) -> String {
    env.json(&["commit", "data", "-d", "ds"])["version"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Pushes `data` (dataset `ds`) from `writer` to two `file://` remotes, `near` and `origin`,
/// and returns their directories.
pub(crate) fn two_copies(writer: &TestEnv) -> (std::path::PathBuf, std::path::PathBuf) {
    let near = writer.path("near");
    let origin = writer.path("origin");
    writer.ok(&[
        "remote",
        "add",
        "near",
        &format!("file://{}", near.display()),
    ]);
    writer.ok(&[
        "remote",
        "add",
        "origin",
        &format!("file://{}", origin.display()),
    ]);
    writer.ok(&["push", "--remote", "near"]);
    writer.ok(&["push", "--remote", "origin"]);
    (near, origin)
}

/// A store reading `near` first, then `origin`, with both remotes' indexes recorded (so
/// reads ask `near` for its frames directly).
pub(crate) fn reader_of(near: &Path, origin: &Path) -> TestEnv {
    let reader = TestEnv::new();
    reader.ok(&[
        "remote",
        "add",
        "origin",
        &format!("file://{}", origin.display()),
    ]);
    reader.ok(&[
        "remote",
        "add",
        "near",
        &format!("file://{}", near.display()),
        "--first",
    ]);
    reader.ok(&["fetch", "--remote", "near"]);
    reader.ok(&["fetch", "--remote", "origin"]);
    reader
}

/// Replaces the directory of a `file://` remote by a file: every request to it fails (a
/// directory that is merely gone reads as an empty remote, a miss).
pub(crate) fn vanish(dir: &Path) {
    std::fs::rename(dir, dir.with_extension("gone")).unwrap();
    std::fs::write(dir, "not a directory\n").unwrap();
}

/// The nearest copy vanished after its indexes were read: `cat` (the read engine) and
/// checkout fall back to origin; with origin gone too, the error is near's, and its hint
/// names both remotes.
#[test]
fn reads_fall_back_when_the_nearest_copy_vanished() {
    let writer = TestEnv::new();
    dataset(&writer, "data", 2);
    let id = commit(&writer);
    let rev = |path: &str| format!("ds@{id}{path}");
    let (near, origin) = two_copies(&writer);
    let reader = reader_of(&near, &origin);
    let stranded = reader_of(&near, &origin);
    vanish(&near);

    let big = reader.run(&["cat", &rev(":big.bin")]);
    assert!(big.status.success(), "{big:?}");
    assert_eq!(
        big.stdout,
        std::fs::read(writer.path("data/big.bin")).unwrap()
    );
    reader.ok(&["checkout", &rev(""), "out"]);
    assert_same_tree(&writer.path("data"), &reader.path("out"));

    vanish(&origin);
    let error = stranded.json_error(&["checkout", &rev(""), "out"], 6);
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("near"), "{error}");
    let hints = error["hints"].to_string();
    assert!(
        hints.contains("read order")
            && hints.contains("\\\"near\\\" failed")
            && hints.contains("\\\"origin\\\" failed"),
        "{error}"
    );
    let error = stranded.json_error(&["cat", &rev(":small/1.txt")], 6);
    assert!(error["hints"].to_string().contains("origin"), "{error}");
}

/// A remote whose pack is damaged fails its frames' checks: the read falls back to the next
/// remote and keeps nothing of the damaged download.
#[test]
fn a_corrupt_copy_falls_back_to_the_next_and_keeps_nothing() {
    let writer = TestEnv::new();
    dataset(&writer, "data", 3);
    let id = commit(&writer);
    let (near, origin) = two_copies(&writer);
    damage_first_pack(&near.join("packs"));
    let reader = reader_of(&near, &origin);
    let engine = reader_of(&near, &origin);

    let checkout = reader.json(&["checkout", "near/ds", "out"]);
    assert_same_tree(&writer.path("data"), &reader.path("out"));
    let got = served(&checkout["remote"]["transfer"]);
    assert_eq!(got[0].0, "near", "{checkout}");
    assert!(
        got[0].2.as_deref().is_some_and(|e| e.contains("corrupt")),
        "{got:?}"
    );
    assert_eq!(got.last().unwrap().0, "origin", "{got:?}");
    reader.ok(&["verify"]);

    let big = engine.run(&["cat", &format!("ds@{id}:big.bin")]);
    assert!(big.status.success(), "{big:?}");
    assert_eq!(
        big.stdout,
        std::fs::read(writer.path("data/big.bin")).unwrap()
    );
    engine.ok(&["verify"]);
    for env in [&reader, &engine] {
        let tmp = env.path(".dsv/tmp");
        let left: Vec<_> = std::fs::read_dir(&tmp)
            .map(|d| d.map(|e| e.unwrap().file_name()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "left in {}: {left:?}", tmp.display());
    }
}
