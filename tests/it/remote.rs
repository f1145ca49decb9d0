//! Remotes against real storage: a local directory (file://), moto's S3 server and azurite's
//! blob service on loopback, both started by `scripts/test-servers` (`scripts/test` runs it
//! and exports their endpoints). One conformance scenario runs on every backend; the fault
//! tests use the backend where the fault can be made real.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde_json::Value;

use crate::common::{TestEnv, assert_same_tree, kill_after, pseudo_random, wait_until};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    File,
    S3,
    Azure,
}

pub(crate) fn endpoint(var: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| {
        panic!("{var} is not set: start the test servers with `eval \"$(scripts/test-servers start)\"` (scripts/test does)")
    })
}

/// A prefix no other test (or earlier run against the same server) uses.
pub(crate) fn unique_prefix() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "t{}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed),
        nanos % 1_000_000_000
    )
}

/// Points `env`'s dsv runs at `backend` (endpoint and credentials in the environment, as a
/// user would) and returns a fresh remote URL there.
fn configure(env: &TestEnv, backend: Backend, remote_dir: &TestEnv) -> String {
    match backend {
        Backend::File => format!("file://{}/remote", remote_dir.root().display()),
        Backend::S3 => {
            use_s3(env);
            format!("s3://dsv-test/{}", unique_prefix())
        }
        Backend::Azure => {
            use_azure(env);
            format!("az://dsv-test/{}", unique_prefix())
        }
    }
}

/// Points `env`'s dsv runs at moto without credentials (requests go unsigned).
pub(crate) fn use_s3_anonymously(env: &TestEnv) {
    env.set_var("AWS_ENDPOINT_URL", &endpoint("DSV_TEST_S3_ENDPOINT"));
    env.set_var("AWS_ALLOW_HTTP", "true");
    env.set_var("AWS_REGION", "us-east-1");
}

/// Points `env`'s dsv runs at moto with credentials, in the environment as a user would set
/// them (the tests check that the secret never reaches the store).
pub(crate) fn use_s3(env: &TestEnv) {
    use_s3_anonymously(env);
    env.set_var("AWS_ACCESS_KEY_ID", "test-key-id");
    env.set_var("AWS_SECRET_ACCESS_KEY", "test-secret-never-stored");
}

/// Points `env`'s dsv runs at azurite.
pub(crate) fn use_azure(env: &TestEnv) {
    env.set_var("AZURE_STORAGE_USE_EMULATOR", "true");
    env.set_var("AZURE_STORAGE_ACCOUNT_NAME", "devstoreaccount1");
    env.set_var(
        "AZURITE_BLOB_STORAGE_URL",
        &endpoint("DSV_TEST_AZURE_ENDPOINT"),
    );
}

/// About 3 MB: 60 small files, 4 of 300 KB, one of 1.5 MB, in nested directories.
fn dataset(env: &TestEnv, dir: &str) {
    for i in 0..60u64 {
        env.write(
            &format!("{dir}/small/{}/f{i}.txt", i % 5),
            format!("row {i}\n").repeat(20 + i as usize),
        );
    }
    for i in 0..4u64 {
        env.write(
            &format!("{dir}/medium/m{i}.bin"),
            pseudo_random(300_000, 100 + i),
        );
    }
    env.write(&format!("{dir}/large.bin"), pseudo_random(1_500_000, 7));
}

fn transfer(report: &Value) -> (u64, u64, u64) {
    let t = &report["transfer"];
    (
        t["bytes"].as_u64().unwrap(),
        t["packs"].as_u64().unwrap(),
        t["requests"].as_u64().unwrap(),
    )
}

/// The scenario every backend must pass: push, clone, lazy checkout, incremental push,
/// cache hit and refresh, fetch, pull, no-op push.
fn conformance(backend: Backend) {
    let remote_home = TestEnv::bare();
    let a = TestEnv::new();
    let url = configure(&a, backend, &remote_home);
    dataset(&a, "data");
    a.ok(&["commit", "data", "-d", "ds", "-t", "v1"]);
    a.ok(&["remote", "add", "origin", &url]);
    let pushed = a.json(&["push"]);
    let statuses: Vec<&str> = pushed["refs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["created", "created"], "{pushed}");
    let (bytes, packs, _) = transfer(&pushed);
    assert!(packs >= 1 && bytes > 1_000_000, "{pushed}");

    // A clone gets datasets, heads and tags, but no file data until a checkout needs it.
    let b = TestEnv::bare();
    configure(&b, backend, &remote_home);
    let cloned = b.json(&["clone", &url, "store"]);
    assert_eq!(
        cloned["datasets"]["ds"], pushed["refs"][0]["version"],
        "{cloned}"
    );
    let (metadata_bytes, _, _) = transfer(&cloned);
    assert!(
        metadata_bytes < 100_000,
        "a clone downloads metadata only: {cloned}"
    );
    let store = b.path("store");
    let in_store = |args: &[&str]| -> Value {
        let mut full = vec!["--store", store.to_str().unwrap()];
        full.extend_from_slice(args);
        b.json(&full)
    };
    let log = in_store(&["log", "ds"]);
    assert_eq!(log[0]["tags"][0], "v1", "{log}");
    in_store(&["checkout", "ds", "out"]);
    assert_same_tree(&a.path("data"), &b.path("out"));
    let verified = in_store(&["verify"]);
    assert_eq!(verified["problems"].as_array().unwrap().len(), 0);

    // An incremental push sends only the new data.
    a.write("data/small/0/f0.txt", "changed\n");
    a.write("data/new.bin", pseudo_random(200_000, 99));
    a.ok(&["commit", "data", "-d", "ds", "-t", "v2"]);
    let second = a.json(&["push", "ds"]);
    let (bytes, _, _) = transfer(&second);
    assert!(bytes < 600_000, "only the changed files travel: {second}");
    assert_eq!(second["refs"][0]["status"], "updated", "{second}");

    // The clone's copy of origin/ds is stale: checkout refreshes it, then a second checkout
    // is a cache hit (one HEAD request, nothing downloaded).
    let refreshed = in_store(&["checkout", "origin/ds", "out"]);
    assert_eq!(refreshed["remote"]["ref_cache"], "refresh", "{refreshed}");
    assert_same_tree(&a.path("data"), &b.path("out"));
    let hit = in_store(&["checkout", "origin/ds@latest", "out"]);
    assert_eq!(hit["remote"]["ref_cache"], "hit", "{hit}");
    assert_eq!(transfer(&hit["remote"]), (0, 0, 1), "{hit}");
    let tagged = in_store(&["checkout", "origin/ds@v1", "old"]);
    assert_eq!(tagged["remote"]["ref_cache"], "hit", "{tagged}");
    assert_eq!(tagged["version"], pushed["refs"][0]["version"], "{tagged}");

    // Pull moves the clone's head forward; fetch sees nothing new; a no-op push sends nothing.
    let pulled = in_store(&["pull", "ds"]);
    assert_eq!(pulled["head"], "moved", "{pulled}");
    let log = in_store(&["log", "ds"]);
    assert_eq!(log[0]["id"], second["refs"][0]["version"], "{log}");
    let fetched = in_store(&["fetch"]);
    assert_eq!(fetched["changed_refs"], 0, "{fetched}");
    assert_eq!(fetched["new_packs"], 0, "{fetched}");
    let noop = a.json(&["push"]);
    assert_eq!(transfer(&noop).0, 0, "{noop}");
    assert!(
        noop["refs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["status"] == "up-to-date"),
        "{noop}"
    );
}

#[test]
fn conformance_file() {
    conformance(Backend::File);
}

#[test]
fn conformance_s3() {
    conformance(Backend::S3);
}

#[test]
fn conformance_azure() {
    conformance(Backend::Azure);
}

#[test]
fn many_small_files_travel_in_a_few_requests() {
    let remote_home = TestEnv::bare();
    let env = TestEnv::new();
    let url = configure(&env, Backend::S3, &remote_home);
    for i in 0..3000 {
        env.write(&format!("data/{}/{i}.txt", i % 30), format!("sample {i}\n"));
    }
    env.ok(&["commit", "data", "-d", "small"]);
    env.ok(&["remote", "add", "origin", &url]);
    let pushed = env.json(&["push"]);
    let (_, _, requests) = transfer(&pushed);
    assert!(
        requests <= 20,
        "3000 files took {requests} requests: {pushed}"
    );

    let clone = TestEnv::bare();
    configure(&clone, Backend::S3, &remote_home);
    clone.ok(&["clone", &url, "store"]);
    let checked = clone.json(&["--store", "store", "checkout", "small", "out"]);
    assert_eq!(checked["files"], 3000);
    assert_same_tree(&env.path("data"), &clone.path("out"));
}

/// One integer `sql` reads from `env`'s catalog.
fn catalog_count(env: &TestEnv, sql: &str) -> i64 {
    let catalog = rusqlite::Connection::open(env.path(".dsv/catalog.db")).unwrap();
    catalog.query_row(sql, [], |row| row.get(0)).unwrap()
}

/// A pushed pack is a local pack: the catalog records it once, its remote row sharing the
/// local index (schema 13), instead of copying its index row by row. When `cache prune` lets
/// the local packs go, their indexes are copied first, so what the remote holds stays known:
/// `verify` counts the files as on the remote, a push finds nothing to send, and a checkout
/// downloads them back.
#[test]
fn a_pushed_pack_shares_the_local_index_and_keeps_it_when_the_local_pack_goes() {
    let remote_home = TestEnv::bare();
    let env = TestEnv::new();
    let url = configure(&env, Backend::File, &remote_home);
    for i in 0..500 {
        env.write(&format!("data/{}/{i}.txt", i % 10), format!("sample {i}\n"));
    }
    env.write("data/large.bin", pseudo_random(1_000_000, 5));
    env.ok(&["commit", "data", "-d", "ds"]);
    // Kept aside: a directory holding the version would keep its data here.
    std::fs::rename(env.path("data"), env.path("reference")).unwrap();
    env.ok(&["remote", "add", "origin", &url]);
    let pushed = env.json(&["push"]);
    let (_, packs, _) = transfer(&pushed);
    assert!(packs >= 1, "{pushed}");
    let shared = "SELECT count(*) FROM remote_packs WHERE local_index = 1";
    assert_eq!(catalog_count(&env, shared), packs as i64);
    assert_eq!(
        catalog_count(&env, "SELECT count(*) FROM remote_objects"),
        0
    );
    let listed = env.json(&["cache", "ls"]);
    assert_eq!(
        listed[0]["on_remotes"],
        serde_json::json!(["origin"]),
        "{listed}"
    );

    let pruned = env.json(&["cache", "prune", "--keep-last", "0"]);
    assert_eq!(pruned["actions"][0]["action"], "evicted", "{pruned}");
    assert_eq!(catalog_count(&env, shared), 0, "the local packs went");
    assert!(catalog_count(&env, "SELECT count(*) FROM remote_objects") > 500);
    let report = env.json(&["verify"]);
    assert_eq!(report["problems"].as_array().unwrap().len(), 0, "{report}");
    assert_eq!(report["files_on_remotes"], 501, "{report}");
    let again = env.json(&["push"]);
    assert_eq!(transfer(&again).1, 0, "{again}");
    env.ok(&["checkout", "ds", "out"]);
    assert_same_tree(&env.path("reference"), &env.path("out"));
}

#[test]
fn pull_with_include_fetches_only_the_matching_files() {
    let remote_home = TestEnv::bare();
    let env = TestEnv::new();
    let url = configure(&env, Backend::S3, &remote_home);
    // Distinct contents (odd seeds: the generator ignores the lowest bit), read in path
    // order by one job, so test/ and train/ files share at most one frame.
    for i in 0..8u64 {
        env.write(
            &format!("data/train/{i}.bin"),
            pseudo_random(400_000, 2 * i + 1),
        );
        env.write(
            &format!("data/test/{i}.bin"),
            pseudo_random(400_000, 2 * (50 + i) + 1),
        );
    }
    env.ok(&["commit", "data", "-d", "ds", "--jobs", "1"]);
    env.ok(&["remote", "add", "origin", &url]);
    env.ok(&["push"]);

    let other = TestEnv::new();
    configure(&other, Backend::S3, &remote_home);
    other.ok(&["remote", "add", "origin", &url]);
    let pushed_bytes = env.json(&["verify"])["pack_bytes"].as_u64().unwrap();
    let pulled = other.json(&["pull", "ds", "--include", "test/**"]);
    let (bytes, _, _) = transfer(&pulled);
    assert!(
        bytes > pushed_bytes * 2 / 5 && bytes < pushed_bytes * 3 / 5,
        "only the test/ files' chunks ({pushed_bytes} bytes pushed): {pulled}"
    );
    // The test files are here now (cat reads only local data).
    let cat = other.run(&["cat", "ds:test/3.bin"]);
    assert!(cat.status.success());
    assert_eq!(cat.stdout, pseudo_random(400_000, 107));
    // One train/ file may share a frame with a test/ file; the others stay on the remote.
    let verified = other.json(&["verify"]);
    let remote_only = verified["files_on_remotes"].as_u64().unwrap();
    assert!((7..=8).contains(&remote_only), "{verified}");
    // A full checkout fetches the rest.
    let checked = other.json(&["checkout", "ds", "out"]);
    assert_eq!(checked["files"], 16);
    assert_same_tree(&env.path("data"), &other.path("out"));
}

#[test]
fn push_only_fast_forwards_and_a_racing_writer_loses_cleanly() {
    let remote_home = TestEnv::bare();
    let a = TestEnv::new();
    let url = configure(&a, Backend::S3, &remote_home);
    a.write("data/x.txt", "one\n");
    a.ok(&["commit", "data", "-d", "ds"]);
    a.ok(&["remote", "add", "origin", &url]);
    a.ok(&["push"]);

    let b = TestEnv::bare();
    configure(&b, Backend::S3, &remote_home);
    b.ok(&["clone", &url, "."]);
    b.ok(&["checkout", "ds", "work"]);
    b.write("work/y.txt", "from b\n");
    b.ok(&["commit", "work", "-d", "ds"]);
    b.ok(&["push"]);

    a.write("data/z.txt", "from a\n");
    a.ok(&["commit", "data", "-d", "ds"]);
    let error = a.json_error(&["push"], 4);
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("has versions of \"ds\" you do not have: pull first"),
        "{error}"
    );
    // Nothing was lost locally, and the remote still has b's version.
    let log = a.json(&["log", "ds"]);
    assert_eq!(log.as_array().unwrap().len(), 2);
    let forced = a.json(&["push", "--force"]);
    assert_eq!(forced["refs"][0]["status"], "forced", "{forced}");

    // Two stores create the same new dataset at the same instant: one wins, the other is
    // refused and told to pull.
    let c = TestEnv::new();
    configure(&c, Backend::S3, &remote_home);
    c.write("d/c.txt", "c\n");
    c.ok(&["commit", "d", "-d", "race"]);
    c.ok(&["remote", "add", "origin", &url]);
    a.write("d/a.txt", "a\n");
    a.ok(&["commit", "d", "-d", "race"]);
    let racers = [
        a.spawn(&["--json", "push", "race"]),
        c.spawn(&["--json", "push", "race"]),
    ];
    let codes: Vec<i32> = racers
        .into_iter()
        .map(|child| child.wait_with_output().unwrap().status.code().unwrap())
        .collect();
    let mut sorted = codes.clone();
    sorted.sort();
    assert_eq!(sorted, [0, 4], "exactly one push wins: {codes:?}");
    let winner = if codes[0] == 0 { &a } else { &c };
    let fetched = c.json(&["fetch"]);
    let head = fetched["refs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["dataset"] == "race" && r["tag"].is_null())
        .unwrap()["version"]
        .clone();
    assert_eq!(head, winner.json(&["log", "race"])[0]["id"]);
}

#[test]
fn a_pack_corrupted_on_the_remote_is_refused_and_nothing_is_kept() {
    let remote_home = TestEnv::bare();
    let a = TestEnv::new();
    let url = configure(&a, Backend::File, &remote_home);
    a.write("data/big.bin", pseudo_random(2_000_000, 3));
    a.ok(&["commit", "data", "-d", "ds"]);
    a.ok(&["remote", "add", "origin", &url]);
    a.ok(&["push"]);
    let b = TestEnv::bare();
    b.ok(&["clone", &url, "."]);
    let packs_before = std::fs::read_dir(b.path(".dsv/packs")).unwrap().count();

    // Flip one byte in the middle of the remote's pack (inside a chunk frame).
    let packs = remote_home.path("remote/packs");
    crate::common::damage_first_pack(&packs);

    let error = b.json_error(&["checkout", "ds", "out"], 5);
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("origin:packs/") && message.contains(".pack"),
        "the error names the remote object: {error}"
    );
    assert_eq!(
        std::fs::read_dir(b.path(".dsv/packs")).unwrap().count(),
        packs_before,
        "nothing of the corrupt download is kept"
    );
    assert!(!b.path("out/big.bin").exists());
    let verified = b.json(&["verify"]);
    assert_eq!(verified["problems"].as_array().unwrap().len(), 0);
}

#[test]
fn an_interrupted_push_resumes_sending_only_what_is_missing() {
    let remote_home = TestEnv::bare();
    let env = TestEnv::new();
    let url = configure(&env, Backend::File, &remote_home);
    // Five versions, one pack each.
    for round in 0..5u64 {
        env.write(
            &format!("data/part{round}.bin"),
            pseudo_random(1_000_000, round),
        );
        env.ok(&["commit", "data", "-d", "ds"]);
    }
    env.ok(&["remote", "add", "origin", &url]);
    let packs: Vec<String> = std::fs::read_dir(env.path(".dsv/packs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(packs.len(), 5);
    // One local pack cannot be read (truncated; a copy is kept): the push stops part-way,
    // after uploading some packs and before moving any ref.
    let damaged = env.path(".dsv/packs").join(&packs[2]);
    let intact = std::fs::read(&damaged).unwrap();
    std::fs::set_permissions(
        &damaged,
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    std::fs::write(&damaged, &intact[..intact.len() / 2]).unwrap();
    let failed = env.json_error(&["push", "--jobs", "1"], 5);
    assert!(
        failed["message"].as_str().unwrap().contains(&packs[2]),
        "{failed}"
    );
    // (No packs directory at all when the damaged pack came first.)
    let present = std::fs::read_dir(remote_home.path("remote/packs"))
        .map(|dir| {
            dir.filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .ends_with(".idx")
            })
            .count() as u64
        })
        .unwrap_or(0);
    assert!(present < 5);
    let other = TestEnv::new();
    other.ok(&["remote", "add", "origin", &url]);
    let fetched = other.json(&["fetch"]);
    assert_eq!(
        fetched["refs"],
        serde_json::json!([]),
        "no ref moved: {fetched}"
    );

    std::fs::write(&damaged, &intact).unwrap();
    let resumed = env.json(&["push"]);
    assert_eq!(
        transfer(&resumed).1,
        5 - present,
        "only the packs still missing are sent: {resumed}"
    );
    assert_eq!(resumed["refs"][0]["status"], "created", "{resumed}");
    other.ok(&["pull", "ds"]);
    other.ok(&["checkout", "ds", "out"]);
    assert_same_tree(&env.path("data"), &other.path("out"));
}

#[test]
fn unreachable_missing_and_refused_remotes_fail_clearly_and_change_nothing() {
    let remote_home = TestEnv::bare();
    let env = TestEnv::new();
    configure(&env, Backend::S3, &remote_home);
    env.write("data/a.txt", "a\n");
    env.ok(&["commit", "data", "-d", "ds"]);
    let head = env.json(&["log", "ds"])[0]["id"].clone();

    // Nothing listens on this port.
    env.ok(&["remote", "add", "down", "s3://dsv-test/x"]);
    let down = env
        .dsv()
        .env("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
        .args(["--json", "push", "--remote", "down"])
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
    assert_eq!(down.status.code(), Some(6), "{down:?}");

    // `remote add` checks the bucket; --no-check adds it anyway, and a push is refused.
    let refused = env.json_error(&["remote", "add", "nobucket", "s3://no-such-bucket/x"], 3);
    assert!(
        refused["hints"][0]
            .as_str()
            .unwrap()
            .contains("does not exist"),
        "{refused}"
    );
    env.ok(&[
        "remote",
        "add",
        "nobucket",
        "s3://no-such-bucket/x",
        "--no-check",
    ]);
    let missing = env.json_error(&["push", "--remote", "nobucket"], 3);
    assert!(
        missing["hints"][0]
            .as_str()
            .unwrap()
            .contains("does not exist"),
        "{missing}"
    );

    // Azurite checks signatures: a wrong account key is refused.
    let azure = TestEnv::new();
    let url = configure(&azure, Backend::Azure, &remote_home);
    azure.set_var("AZURE_STORAGE_ACCOUNT_KEY", "d3Jvbmcta2V5LXdyb25nLWtleQ==");
    azure.set_var("AZURE_STORAGE_USE_EMULATOR", "false");
    azure.set_var(
        "AZURE_STORAGE_ENDPOINT",
        &format!("{}/devstoreaccount1", endpoint("DSV_TEST_AZURE_ENDPOINT")),
    );
    azure.set_var("AZURE_ALLOW_HTTP", "true");
    azure.write("data/a.txt", "a\n");
    azure.ok(&["commit", "data", "-d", "ds"]);
    azure.ok(&["remote", "add", "origin", &url, "--no-check"]);
    let refused = azure.run(&["push"]);
    assert_eq!(refused.status.code(), Some(3), "{refused:?}");

    // Credentials are refused as options and never written to the store.
    let error = env.json_error(
        &[
            "remote",
            "add",
            "leaky",
            "s3://dsv-test/y",
            "--option",
            "aws_secret_access_key=abc",
        ],
        3,
    );
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("credentials are never stored"),
        "{error}"
    );
    let listed = env.ok(&["remote", "ls"]);
    assert!(!listed.contains("test-secret"), "{listed}");
    for entry in std::fs::read_dir(env.path(".dsv")).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            let bytes = std::fs::read(&path).unwrap();
            assert!(
                !bytes
                    .windows(b"test-secret-never-stored".len())
                    .any(|w| w == b"test-secret-never-stored"),
                "{} holds the secret",
                path.display()
            );
        }
    }
    assert_eq!(env.json(&["log", "ds"])[0]["id"], head);
}

#[test]
fn remote_names_urls_and_revisions_are_checked() {
    let env = TestEnv::new();
    env.fails(&["remote", "add", "bad name", "s3://b/p"], 3);
    env.fails(&["remote", "add", "x", "ftp://host/p"], 3);
    env.fails(&["remote", "add", "x", "file://relative"], 3);
    // GCS is covered by configuration only (no emulator here): the URL is accepted.
    env.ok(&["remote", "add", "gcs", "gs://bucket/prefix", "--no-check"]);
    env.fails(&["remote", "add", "gcs", "gs://bucket/other"], 3);
    env.fails(&["checkout", "nosuch/ds", "out"], 3);
    env.ok(&["remote", "rm", "gcs"]);
    env.fails(&["remote", "rm", "gcs"], 3);
    let listed = env.json(&["remote", "ls"]);
    assert_eq!(listed, serde_json::json!([]));
}

/// A moto server of the test's own, on a free port, that the test can kill and restart,
/// or freeze (SIGSTOP: connections are still accepted by the kernel, never answered, as a
/// hung server does) and thaw.
pub(crate) struct PrivateS3 {
    port: u16,
    log: std::path::PathBuf,
    child: Option<std::process::Child>,
}

impl PrivateS3 {
    pub(crate) fn start(log: std::path::PathBuf) -> PrivateS3 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut server = PrivateS3 {
            port,
            log,
            child: None,
        };
        server.restart();
        server
    }

    fn restart(&mut self) {
        let log = std::fs::File::create(&self.log).unwrap();
        // A cleared environment: a developer's AWS_* (a profile, a config file) made moto
        // answer 500 to every request.
        let child = std::process::Command::new(endpoint("DSV_TEST_MOTO_SERVER"))
            .args(["-H", "127.0.0.1", "-p", &self.port.to_string()])
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        wait_until(&format!("moto to start on port {}", self.port), || {
            std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok()
        });
        // Moto keeps everything in memory: the bucket is made anew on each start.
        http_put(self.port, "/dsv-test");
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Whether a client holds an open connection to the server now (an established TCP
    /// connection to its port in `/proc/net/tcp`, seen from the client's side): a frozen
    /// server's kernel still accepts one, so this tells that a request is waiting on it.
    pub(crate) fn has_a_client(&self) -> bool {
        let port = format!(":{:04X}", self.port);
        std::fs::read_to_string("/proc/net/tcp")
            .unwrap_or_default()
            .lines()
            .skip(1)
            .any(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                fields.get(2).is_some_and(|remote| remote.ends_with(&port))
                    && fields.get(3) == Some(&"01")
            })
    }

    fn signal(&self, signal: &str) {
        let child = self.child.as_ref().expect("the server runs");
        let status = std::process::Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill {signal}");
    }

    /// Freezes the server: connections are still accepted (by the kernel), never answered.
    pub(crate) fn freeze(&self) {
        self.signal("-STOP");
    }

    /// Thaws a frozen server: what waited is answered.
    pub(crate) fn thaw(&self) {
        self.signal("-CONT");
    }

    /// Ranged GETs of pack data the server answered so far.
    pub(crate) fn pack_reads(&self) -> usize {
        std::fs::read_to_string(&self.log)
            .unwrap()
            .lines()
            // (moto colours some lines: the method may follow an escape sequence)
            .filter(|line| line.contains("GET /") && line.contains(".pack HTTP"))
            .count()
    }

    /// Adds it to `env` (store `store`, or the default) as remote `name` at `prefix`.
    pub(crate) fn add(&self, env: &TestEnv, store: &[&str], name: &str, prefix: &str, first: bool) {
        self.add_with(env, store, name, prefix, first, &[]);
    }

    /// As [`PrivateS3::add`], with remote options `options` (`KEY=VALUE` each).
    pub(crate) fn add_with(
        &self,
        env: &TestEnv,
        store: &[&str],
        name: &str,
        prefix: &str,
        first: bool,
        options: &[&str],
    ) {
        let url = format!("s3://dsv-test/{prefix}");
        let endpoint = format!("aws_endpoint={}", self.endpoint());
        let mut args: Vec<&str> = store.to_vec();
        args.extend([
            "remote",
            "add",
            name,
            &url,
            "--option",
            &endpoint,
            "--option",
            "aws_allow_http=true",
        ]);
        for option in options {
            args.extend(["--option", option]);
        }
        if first {
            args.push("--first");
        }
        env.ok(&args);
    }
}

impl Drop for PrivateS3 {
    fn drop(&mut self) {
        self.kill();
    }
}

/// An unsigned `PUT path` (moto accepts any credentials, and none).
fn http_put(port: u16, path: &str) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        stream,
        "PUT {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
}

#[test]
fn a_push_cut_off_by_the_server_dying_completes_when_run_again() {
    let env = TestEnv::new();
    let mut server = PrivateS3::start(env.path("moto.log"));
    let remote_home = TestEnv::bare();
    configure(&env, Backend::S3, &remote_home);
    env.set_var("AWS_ENDPOINT_URL", &server.endpoint());
    for round in 0..6u64 {
        env.write(
            &format!("data/part{round}.bin"),
            pseudo_random(3_000_000, 2 * round + 1),
        );
        env.ok(&["commit", "data", "-d", "ds"]);
    }
    let url = format!("s3://dsv-test/{}", unique_prefix());
    env.ok(&["remote", "add", "origin", &url]);
    let push = env.spawn(&["--json", "push", "--jobs", "1"]);
    // Kill the server once the first pack has arrived: five more are still to go.
    wait_until("a pack to arrive", || {
        std::fs::read_to_string(env.path("moto.log"))
            .unwrap()
            .contains(".pack HTTP/1.1\" 200")
    });
    server.kill();
    let out = push.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(6), "{out:?}");
    let error: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(error["error"]["kind"], "io", "{error}");
    // Nothing local changed, and no remote ref was recorded.
    let listed = env.json(&["remote", "ls"]);
    assert_eq!(listed[0]["refs"], serde_json::json!([]), "{listed}");
    assert_eq!(env.json(&["log", "ds"]).as_array().unwrap().len(), 6);

    // The server is back (empty: moto keeps nothing); the re-run completes.
    server.restart();
    let pushed = env.json(&["push"]);
    assert_eq!(pushed["refs"][0]["status"], "created", "{pushed}");
    let clone = TestEnv::bare();
    configure(&clone, Backend::S3, &remote_home);
    clone.set_var("AWS_ENDPOINT_URL", &server.endpoint());
    clone.ok(&["clone", &url, "."]);
    clone.ok(&["checkout", "ds", "out"]);
    assert_same_tree(&env.path("data"), &clone.path("out"));
}

#[test]
fn a_full_pack_goes_up_in_parts_and_comes_back_whole() {
    let remote_home = TestEnv::bare();
    let env = TestEnv::new();
    let url = configure(&env, Backend::S3, &remote_home);
    // 36 MB of incompressible data: one pack over the 32 MiB multipart threshold.
    env.write("data/big.bin", pseudo_random(36_000_000, 11));
    env.ok(&["commit", "data", "-d", "big"]);
    let largest = std::fs::read_dir(env.path(".dsv/packs"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .max()
        .unwrap();
    assert!(largest >= 32 * 1024 * 1024, "{largest}");
    env.ok(&["remote", "add", "origin", &url]);
    let pushed = env.json(&["push"]);
    // A multipart upload makes more requests than one PUT per pack and index would.
    let (_, packs, requests) = transfer(&pushed);
    assert!(requests > 2 * packs + 4, "{pushed}");
    let clone = TestEnv::bare();
    configure(&clone, Backend::S3, &remote_home);
    clone.ok(&["clone", &url, "."]);
    clone.ok(&["checkout", "big", "out"]);
    assert_same_tree(&env.path("data"), &clone.path("out"));
}

#[test]
fn a_public_bucket_is_read_without_credentials() {
    let remote_home = TestEnv::bare();
    let owner = TestEnv::new();
    configure(&owner, Backend::S3, &remote_home);
    // A bucket whose policy lets anyone read (made by scripts/test-servers).
    let url = format!("s3://dsv-public/{}", unique_prefix());
    owner.write("data/readme.txt", "open data\n");
    owner.ok(&["commit", "data", "-d", "open"]);
    owner.ok(&["remote", "add", "origin", &url]);
    owner.ok(&["push"]);

    // No AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY at all: requests go unsigned.
    let reader = TestEnv::bare();
    use_s3_anonymously(&reader);
    reader.ok(&[
        "clone",
        &url,
        "store",
        "--option",
        "aws_skip_signature=true",
    ]);
    reader.ok(&["--store", "store", "checkout", "open", "out"]);
    assert_same_tree(&owner.path("data"), &reader.path("out"));
    let listed = reader.json(&["--store", "store", "remote", "ls"]);
    assert_eq!(
        listed[0]["options"]["aws_skip_signature"], "true",
        "{listed}"
    );
}

fn assert_verified(env: &TestEnv) {
    let report = env.json(&["verify"]);
    assert_eq!(report["problems"].as_array().unwrap().len(), 0, "{report}");
}

#[test]
fn kill_during_push_and_pull_leaves_both_stores_consistent_and_reruns_finish() {
    // Promise 1 for transfers: 48 MB in four versions, moved one request at a time.
    let remote_home = TestEnv::bare();
    let env = TestEnv::new();
    let url = configure(&env, Backend::S3, &remote_home);
    for i in 0..4u64 {
        env.write(
            &format!("data/part{i}.bin"),
            pseudo_random(12_000_000, 2 * i + 1),
        );
        env.ok(&["commit", "data", "-d", "ds"]);
    }
    env.ok(&["remote", "add", "origin", &url]);
    let mut landed = 0;
    for delay in [40u64, 150] {
        if kill_after(&env, &["push", "--jobs", "1"], Duration::from_millis(delay)) {
            landed += 1;
        }
        assert_verified(&env);
    }
    let pushed = env.json(&["push"]);
    assert_eq!(
        pushed["refs"][0]["version"],
        env.json(&["log", "ds"])[0]["id"]
    );

    let other = TestEnv::new();
    configure(&other, Backend::S3, &remote_home);
    other.ok(&["remote", "add", "origin", &url]);
    for delay in [40u64, 150] {
        if kill_after(
            &other,
            &["pull", "ds", "--jobs", "1"],
            Duration::from_millis(delay),
        ) {
            landed += 1;
        }
        assert_verified(&other);
    }
    other.ok(&["pull", "ds"]);
    other.ok(&["checkout", "ds", "out"]);
    assert_same_tree(&env.path("data"), &other.path("out"));
    assert_verified(&other);
    assert!(
        landed >= 2,
        "the kills must land while the transfers run ({landed} did)"
    );
}

#[test]
fn concurrent_pulls_into_one_store_download_the_data_once() {
    // Promise 5: one process per GPU pulling the same version into one store.
    let remote_home = TestEnv::bare();
    let env = TestEnv::new();
    let url = configure(&env, Backend::S3, &remote_home);
    env.write("data/a.bin", pseudo_random(6_000_000, 5));
    env.write("data/b.bin", pseudo_random(6_000_000, 7));
    env.ok(&["commit", "data", "-d", "ds"]);
    env.ok(&["remote", "add", "origin", &url]);
    env.ok(&["push"]);

    let gpus = TestEnv::new();
    configure(&gpus, Backend::S3, &remote_home);
    gpus.ok(&["remote", "add", "origin", &url]);
    gpus.ok(&["fetch"]);
    let pulls: Vec<_> = (0..4)
        .map(|_| gpus.spawn(&["--json", "pull", "ds", "--jobs", "2"]))
        .collect();
    let mut downloaded = 0;
    for pull in pulls {
        let out = pull.wait_with_output().unwrap();
        assert!(out.status.success(), "{out:?}");
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        downloaded += report["transfer"]["bytes"].as_u64().unwrap();
    }
    assert!(
        (12_000_000..13_000_000).contains(&downloaded),
        "four pulls downloaded {downloaded} bytes in all: the data once"
    );
    gpus.ok(&["checkout", "ds", "out"]);
    assert_same_tree(&env.path("data"), &gpus.path("out"));
}
